"""Real sizes: BERT-base, GPT-2 small, MobileNetV2 at 224 px and a ~1B Llama-shaped model.

Issue 23's tier: every figure elsewhere is on the zoo's tiny configs. Here the models
are the real ones, built locally by ``transformers`` with random init (nothing is
downloaded) and exported as users export them, ``torch.onnx.export(dynamo=True,
optimize=False, external_data=True)``:

==============  ===========================================  =============
model           ``transformers`` class and config             batch
==============  ===========================================  =============
bert-base       ``BertModel``, ``BertConfig()`` (110M)        4 x 64 tokens
gpt2-small      ``GPT2LMHeadModel``, ``GPT2Config()`` (124M,  4 x 64 tokens
                tied embeddings)
mobilenet-v2    ``MobileNetV2ForImageClassification``, 1.0,   4 x 3 x 224 x 224
                224 px, 1000 classes (3.5M; BatchNorm in
                train mode)
llama-1b        ``LlamaForCausalLM``: hidden 2048, 16 layers, 1 x 128 tokens
                32 heads, 8 KV heads, intermediate 5632,
                vocabulary 32000 (0.86B parameters)
==============  ===========================================  =============

The loss is the MSE of the model's first output (hidden states or logits) against a
fixed random target, the optimizer AdamW (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight
decay 0.01), 2 threads. Three trainers, each in a process of its own, one run:

* **graphpass**: ``graphpass run MODEL -o READY.onnx -p train-ready
  --emit-training-graph DIR``, then ``graphpass.training.Trainer(DIR)`` on stock
  onnxruntime;
* **torch**: the same model (the same seed, so the same initial weights) in eager mode,
  ``torch.optim.AdamW``;
* **ort-training**: onnxruntime-training 1.19.2 in ``.venv-ort-training``: ``graphpass
  run ... --emit-training-artifacts DIR`` (``generate_artifacts``, MSE loss, AdamW), then
  ``onnxruntime.training.api``'s ``Module`` and ``Optimizer``; left out where the venv
  is missing, and recorded as failed where it does not build or run.

Per model: the step time (the median of the timed steps after the warm-up), the peak
resident memory over the resident memory after the runtime's imports (the kernel's
``VmHWM``, reset through ``/proc/self/clear_refs`` once the imports are done, minus
``VmRSS`` then: exact, no sampling), the build's wall time and peak resident memory
(``ru_maxrss`` of the build process, from ``wait4``), the training directory's bytes
against the trainable weights', the first 3 losses of each trainer and their largest
relative difference to torch's, and the step's FLOPs (the forward's FLOPs as
``torch.utils.flop_counter.FlopCounterMode`` counts them: matrix products, attention
and convolutions, 2 per multiply-add; times 3 for forward and backward) against the
machine's MatMul rate (2048 x 2048 float32, 2 threads, in onnxruntime and in torch,
measured in the same run).

Every child runs under a memory watch: a process whose resident memory passes
``--memory-cap-gb`` (default 22) or that leaves the machine less than 0.5 GB available is
killed, and its trainer is recorded as **does not fit**.

``--largest`` (slow) also probes the Llama shape family at hidden 2048, batch 1 x 128,
for the most layers (16, 24, 32, ...) that train 2 steps under the cap, for torch and
for graphpass.

Exports, training directories and each model's measurements are cached under
``benchmarks/.cache/real-sizes`` (``--cache``), so an interrupted run resumes where it
stopped; ``--fresh`` measures again (the exports stay). The record goes to
``benchmarks/results/real_sizes.json`` and its table to the "Real sizes" section of
``docs/benchmarks.md``; ``--from-json RECORD`` rewrites that section from a record
without measuring.

Usage::

    .venv/bin/python benchmarks/real_sizes.py [--models bert-base,...] [--small | --tiny]
        [--steps 3] [--warmup 1] [--largest] [--fresh] [--no-docs] [--from-json RECORD]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve()
sys.path.insert(0, str(REPO / "benchmarks"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from _bench import write_docs_section  # noqa: E402

CACHE = REPO / "benchmarks" / ".cache" / "real-sizes"
RESULTS = REPO / "benchmarks" / "results" / "real_sizes.json"
SECTION = "real-sizes"
RUNNERS = ("graphpass", "torch", "ort-training")
THREADS = 2
LR = 1e-3
SEED = 0
GB = 2**30
MB = 2**20
LOW_MEMORY = 512 * MB
"""A child is killed when the machine's available memory falls below this."""


@dataclass(frozen=True)
class Spec:
    """One model of the tier.

    Attributes:
        model_class: The ``transformers`` class.
        config_class: Its config class.
        config: The config's arguments (on top of the class's defaults).
        input_shape: The batch's first input (``input_ids`` or ``pixel_values``).
        attention_mask: Whether the model also takes an all-ones ``attention_mask``.
        batch_norm: Whether the model has batch normalizations (trained in train mode).
        label: How the docs name it.
    """

    model_class: str
    config_class: str
    config: dict[str, Any]
    input_shape: tuple[int, ...]
    attention_mask: bool = False
    batch_norm: bool = False
    label: str = ""

    @property
    def input_names(self) -> tuple[str, ...]:
        """The exported model's inputs, in order."""
        first = "pixel_values" if len(self.input_shape) == 4 else "input_ids"
        return (first, "attention_mask") if self.attention_mask else (first,)

    @property
    def tokens(self) -> int | None:
        """Tokens in a batch (``None`` for images)."""
        return None if len(self.input_shape) == 4 else self.input_shape[0] * self.input_shape[1]


LLAMA = {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 32,
         "num_key_value_heads": 8, "intermediate_size": 5632, "vocab_size": 32000,
         "max_position_embeddings": 2048, "tie_word_embeddings": False}

FULL: dict[str, Spec] = {
    "bert-base": Spec("BertModel", "BertConfig", {}, (4, 64), label="BERT-base"),
    "gpt2-small": Spec("GPT2LMHeadModel", "GPT2Config", {}, (4, 64), attention_mask=True,
                       label="GPT-2 small"),
    "mobilenet-v2": Spec("MobileNetV2ForImageClassification", "MobileNetV2Config",
                         {"depth_multiplier": 1.0, "image_size": 224, "num_labels": 1000},
                         (4, 3, 224, 224), batch_norm=True, label="MobileNetV2 1.0, 224 px"),
    "llama-1b": Spec("LlamaForCausalLM", "LlamaConfig", LLAMA, (1, 128), attention_mask=True,
                     label="Llama-shaped, hidden 2048, 16 layers"),
}

_SMALL_TEXT = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
               "intermediate_size": 128, "vocab_size": 1000}
SMALL: dict[str, Spec] = {
    "bert-base": Spec("BertModel", "BertConfig", {**_SMALL_TEXT, "max_position_embeddings": 64},
                      (4, 64), label="BERT (small)"),
    "gpt2-small": Spec("GPT2LMHeadModel", "GPT2Config",
                       {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000,
                        "n_positions": 64}, (4, 64), attention_mask=True, label="GPT-2 (small)"),
    "mobilenet-v2": Spec("MobileNetV2ForImageClassification", "MobileNetV2Config",
                         {"depth_multiplier": 0.35, "image_size": 64, "num_labels": 10},
                         (2, 3, 64, 64), batch_norm=True, label="MobileNetV2 0.35, 64 px"),
    "llama-1b": Spec("LlamaForCausalLM", "LlamaConfig",
                     {**_SMALL_TEXT, "num_key_value_heads": 2, "max_position_embeddings": 128,
                      "tie_word_embeddings": False}, (1, 128), attention_mask=True,
                     label="Llama-shaped (small)"),
}
TINY: dict[str, Spec] = {
    "bert-base": Spec("BertModel", "BertConfig",
                      {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                       "intermediate_size": 64, "vocab_size": 100,
                       "max_position_embeddings": 16}, (2, 8), label="BERT (tiny)"),
    "gpt2-small": Spec("GPT2LMHeadModel", "GPT2Config",
                       {"n_embd": 32, "n_layer": 1, "n_head": 2, "vocab_size": 100,
                        "n_positions": 16}, (2, 8), attention_mask=True, label="GPT-2 (tiny)"),
    "mobilenet-v2": SMALL["mobilenet-v2"],
    "llama-1b": Spec("LlamaForCausalLM", "LlamaConfig",
                     {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
                      "num_key_value_heads": 2, "intermediate_size": 64, "vocab_size": 100,
                      "max_position_embeddings": 16, "tie_word_embeddings": False}, (1, 8),
                     attention_mask=True, label="Llama-shaped (tiny)"),
}
SIZES = {"full": FULL, "small": SMALL, "tiny": TINY}


def spec_of(size: str, name: str, layers: int | None = None) -> Spec:
    """The model ``name`` at ``size``; ``layers`` overrides a Llama's layer count (probes)."""
    spec = SIZES[size][name]
    if layers is None:
        return spec
    return Spec(spec.model_class, spec.config_class,
                {**spec.config, "num_hidden_layers": layers}, spec.input_shape,
                spec.attention_mask, spec.batch_norm, f"{spec.label}, {layers} layers")


# ------------------------------------------------------------------------ the models
def build_model(spec: Spec) -> Any:
    """The model of ``spec`` around a wrapper that returns its first output, seeded, in
    eval mode but for batch normalizations (train mode: batch statistics)."""
    import torch
    import transformers

    sys.path.insert(0, str(REPO / "tests"))
    from zoo.cases import _trained_like, make_wrapper

    config = getattr(transformers, spec.config_class)(**spec.config)
    torch.manual_seed(SEED)
    model = getattr(transformers, spec.model_class)(config)
    # torch's default init for linear and conv layers, seeded noise on constant tensors:
    # Hugging Face's init makes MobileNetV2's logits vanish (1e-27), so its losses would
    # compare nothing (see tests/zoo/cases.py)
    _trained_like(model)
    wrapper = make_wrapper(model.eval(), spec.input_names)
    return wrapper


def batch_of(spec: Spec, output_shape: tuple[int, ...]) -> dict[str, Any]:
    """The batch: the inputs (seeded) and the MSE target."""
    import numpy as np

    rng = np.random.default_rng(SEED + 1)
    first, *rest = spec.input_names
    if first == "input_ids":
        vocab = int(spec.config.get("vocab_size", {"BertConfig": 30522, "GPT2Config": 50257}
                                    .get(spec.config_class, 1000)))
        batch = {first: rng.integers(1, vocab, size=spec.input_shape, dtype=np.int64)}
    else:
        batch = {first: rng.standard_normal(spec.input_shape, dtype=np.float32)}
    if rest:
        batch["attention_mask"] = np.ones(spec.input_shape, dtype=np.int64)
    batch["target"] = np.random.default_rng(SEED + 2).standard_normal(output_shape,
                                                                      dtype=np.float32)
    return batch


def _parameters(model: Any) -> tuple[int, int]:
    """Trainable parameters (ties counted once) and their bytes."""
    seen = {id(p): p for p in model.parameters() if p.requires_grad}
    return (sum(p.numel() for p in seen.values()),
            sum(p.numel() * p.element_size() for p in seen.values()))


def _export(job: dict[str, Any]) -> dict[str, Any]:
    """Worker: build, export with external data, write the batch; what it found."""
    import warnings

    import numpy as np
    import torch

    torch.set_num_threads(THREADS)
    spec = Spec(**{**job["spec"], "input_shape": tuple(job["spec"]["input_shape"])})
    folder = Path(job["folder"])
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    model = build_model(spec)
    parameters, weight_bytes = _parameters(model)
    import transformers

    sample = batch_of(spec, (1,))
    arguments = tuple(torch.from_numpy(sample[n]) for n in spec.input_names)
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with torch.no_grad(), counter:
        output_shape = tuple(model(*arguments).shape)
    flops = {str(op).split(".")[1] if "." in str(op) else str(op): int(n)
             for op, n in counter.get_flop_counts().get("Global", {}).items()}
    config = model.model.config
    if spec.tokens and not any("attention" in op for op in flops):
        # FlopCounterMode does not see CPU's scaled_dot_product_attention: its two
        # products (Q K^T and the weights times V), 2 B S^2 hidden FLOPs each, per layer
        batch, length = spec.input_shape
        hidden = getattr(config, "hidden_size", None) or config.n_embd
        layers = getattr(config, "num_hidden_layers", None) or config.n_layer
        flops["attention (counted here)"] = 4 * batch * length**2 * hidden * layers
    batch = batch_of(spec, output_shape)
    np.savez(folder / "batch.npz", **batch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, arguments, str(folder / "model.onnx"), dynamo=True,
                          optimize=False, external_data=True, verbose=False,
                          input_names=list(spec.input_names), output_names=["output"])
    import onnx

    return {"parameters": parameters, "weight_bytes": weight_bytes, "forward_flops": flops,
            "output_shape": list(output_shape), "seconds": time.perf_counter() - started,
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "onnx": onnx.__version__}}


# --------------------------------------------------------------- children and memory
@dataclass
class Child:
    """What a child process did."""

    returncode: int
    stdout: str
    stderr: str
    seconds: float
    peak_bytes: int
    killed: str | None = None

    def result(self) -> dict[str, Any]:
        """The JSON the child printed last."""
        result: dict[str, Any] = json.loads(self.stdout.strip().splitlines()[-1])
        return result


def _status_kib(pid: int, key: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[1])
    return None


def available_bytes() -> int:
    """The machine's available memory (``MemAvailable``)."""
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 1 << 62


def run_child(command: list[str], cap_bytes: int, *, cwd: Path = REPO,
              timeout: float | None = None) -> Child:
    """Run ``command`` under a memory watch: killed (``SIGKILL``) when its resident memory
    passes ``cap_bytes`` or the machine's available memory falls below 0.5 GB."""
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "MKL_NUM_THREADS": str(THREADS),
           "PYTHONUNBUFFERED": "1"}
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        started = time.perf_counter()
        process = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd, env=env)
        killed: list[str] = []
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.1):
                rss = _status_kib(process.pid, "VmRSS:")
                if rss is None:
                    return
                reason = None
                if rss * 1024 > cap_bytes:
                    reason = f"resident memory passed the cap of {cap_bytes / GB:.1f} GB"
                elif available_bytes() < LOW_MEMORY:
                    reason = (f"the machine's available memory fell below "
                              f"{LOW_MEMORY / MB:.0f} MB (the process held {rss / 2**20:.1f} GB)")
                elif timeout is not None and time.perf_counter() - started > timeout:
                    reason = f"ran past {timeout:.0f} s"
                if reason:
                    killed.append(reason)
                    os.kill(process.pid, signal.SIGKILL)
                    return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        _, status, usage = os.wait4(process.pid, 0)
        done.set()
        watcher.join()
        process.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.perf_counter() - started
        out.seek(0)
        err.seek(0)
        return Child(process.returncode, out.read(), err.read(), seconds,
                     usage.ru_maxrss * 1024, killed[0] if killed else None)


def _failure(child: Child) -> str:
    if child.killed:
        return f"does not fit: killed, {child.killed}"
    if child.returncode < 0:
        return f"died of signal {-child.returncode} (out of memory?)"
    tail = (child.stderr.strip() or child.stdout.strip()).splitlines()
    return f"exit {child.returncode}: " + " / ".join(tail[-3:])[-600:]


def _worker(python: str, kind: str, job: dict[str, Any], folder: Path, cap: int,
            timeout: float | None = None) -> Child:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{kind}-{job.get('runner', 'job')}.json"
    path.write_text(json.dumps(job))
    return run_child([python, str(HERE), "--worker", kind, str(path)], cap, timeout=timeout)


# ------------------------------------------------------------------------- the workers
def _rss_bytes() -> int:
    return (_status_kib(os.getpid(), "VmRSS:") or 0) * 1024


def _reset_peak() -> None:
    """Reset this process's ``VmHWM`` to its current resident memory."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def _peak_bytes() -> int:
    kib = _status_kib(os.getpid(), "VmHWM:")
    return (kib if kib is not None
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def _graphpass_trainer(job: dict[str, Any], batch: dict[str, Any]) -> Callable[[], float]:
    from graphpass.training import Trainer, default_session_options

    options = default_session_options()  # the Trainer's own choices, with the threads
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    trainer = Trainer(job["directory"], lr=LR, session_options=options)
    return lambda: float(trainer.step(batch))


def _ort_trainer(job: dict[str, Any], batch: dict[str, Any]) -> Callable[[], float]:
    import numpy as np
    import onnxruntime
    from onnxruntime.training import api

    onnxruntime.set_default_logger_severity(3)
    artifacts = Path(job["directory"])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.inter_op_num_threads = 1
    state = api.CheckpointState.load_checkpoint(str(artifacts / "checkpoint"))
    module = api.Module(str(artifacts / "training_model.onnx"), state,
                        str(artifacts / "eval_model.onnx"), session_options=options)
    optimizer = api.Optimizer(str(artifacts / "optimizer_model.onnx"), module)
    optimizer.set_learning_rate(LR)
    feeds = [batch[name] for name in module.input_names()]
    module.train()

    def step() -> float:
        loss = module(*feeds)
        optimizer.step()
        module.lazy_reset_grad()
        return float(np.asarray(loss).reshape(-1)[0])

    return step


def _torch_trainer(job: dict[str, Any], batch: dict[str, Any]) -> Callable[[], float]:
    import torch

    torch.set_num_threads(THREADS)
    spec = Spec(**{**job["spec"], "input_shape": tuple(job["spec"]["input_shape"])})
    model = build_model(spec)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.train()
    inputs = [torch.from_numpy(batch[name]) for name in spec.input_names]
    target = torch.from_numpy(batch["target"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                                  weight_decay=0.01)

    def step() -> float:
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(*inputs), target)
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    return step


TRAINERS = {"graphpass": _graphpass_trainer, "ort-training": _ort_trainer,
            "torch": _torch_trainer}
IMPORTS = {"graphpass": ("onnxruntime", "graphpass.training"),
           "ort-training": ("onnxruntime", "onnxruntime.training.api"),
           "torch": ("torch", "transformers")}
"""What each trainer imports before the memory baseline is taken."""


def _train(job: dict[str, Any]) -> dict[str, Any]:
    """Worker: load the trainer, run the steps; times, losses, memory."""
    import importlib

    import numpy as np

    with np.load(job["batch"]) as data:
        batch = {name: data[name] for name in data.files}
    for module in IMPORTS[job["runner"]]:
        importlib.import_module(module)
    _reset_peak()  # the imports may have peaked higher
    before = _rss_bytes()
    started = time.perf_counter()
    step = TRAINERS[job["runner"]](job, batch)
    load_seconds = time.perf_counter() - started
    losses, times = [], []
    for _ in range(job["warmup"] + job["steps"]):
        started = time.perf_counter()
        losses.append(step())
        times.append(time.perf_counter() - started)
    timed = times[job["warmup"]:] or times
    return {"step_s": statistics.median(timed), "steps_s": times, "load_s": load_seconds,
            "losses": losses, "baseline_mb": before / MB,
            "peak_mb": (_peak_bytes() - before) / MB}


def _matmul(job: dict[str, Any]) -> dict[str, Any]:
    """Worker: 2048 x 2048 float32 MatMul GFLOP/s, 2 threads (best of the repeats)."""
    import numpy as np

    n, repeats = job["n"], job["repeats"]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    if job["runner"] == "torch":
        import torch

        torch.set_num_threads(THREADS)
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)

        def run() -> None:
            torch.mm(ta, tb)
    else:
        import onnx
        import onnxruntime
        from onnx import TensorProto, helper

        graph = helper.make_graph(
            [helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, [n, n]),
             helper.make_tensor_value_info("b", TensorProto.FLOAT, [n, n])],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, [n, n])])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        proto.ir_version = 8
        onnx.checker.check_model(proto)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = THREADS
        options.inter_op_num_threads = 1
        session = onnxruntime.InferenceSession(proto.SerializeToString(), options,
                                               providers=["CPUExecutionProvider"])

        def run() -> None:
            session.run(None, {"a": a, "b": b})
    run()
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return {"gflops": 2 * n**3 / best / 1e9, "best_s": best}


WORKERS = {"export": _export, "train": _train, "matmul": _matmul}


# ---------------------------------------------------------------------- orchestration
@dataclass
class Settings:
    """The run's settings."""

    size: str
    cache: Path
    steps: int
    warmup: int
    cap: int
    fresh: bool
    runners: tuple[str, ...]
    ort_python: str | None
    notes: list[str] = field(default_factory=list)
    matmul_size: int = 2048
    timeout: float | None = 1800.0
    rates_from: str | None = None


def ort_training_python() -> str | None:
    """The onnxruntime-training venv's Python, or ``None`` where there is none."""
    candidate = os.environ.get("GRAPHPASS_ORT_TRAINING_PYTHON") or str(
        REPO / ".venv-ort-training" / "bin" / "python")
    return candidate if Path(candidate).exists() else None


def _directory_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _spec_json(spec: Spec) -> dict[str, Any]:
    return {"model_class": spec.model_class, "config_class": spec.config_class,
            "config": spec.config, "input_shape": list(spec.input_shape),
            "attention_mask": spec.attention_mask, "batch_norm": spec.batch_norm,
            "label": spec.label}


def _log(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def ensure_export(spec: Spec, folder: Path, cap: int) -> dict[str, Any]:
    """The export of ``spec`` in ``folder`` (made once; ``export.json`` says what it is)."""
    record = folder / "export.json"
    if record.exists():
        cached: dict[str, Any] = json.loads(record.read_text())
        if cached.get("spec") == _spec_json(spec):
            return cached
    shutil.rmtree(folder, ignore_errors=True)
    _log(f"exporting {spec.label} ...")
    child = _worker(sys.executable, "export", {"spec": _spec_json(spec),
                                               "folder": str(folder)}, folder, cap)
    if child.returncode != 0:
        return {"error": "export failed: " + _failure(child), "spec": _spec_json(spec)}
    result = {**child.result(), "spec": _spec_json(spec), "peak_mb": child.peak_bytes / MB}
    record.write_text(json.dumps(result, indent=1))
    return result


def build(python: str, flag: str, folder: Path, out: Path, cap: int,
          timeout: float | None = None) -> dict[str, Any]:
    """``graphpass run -p train-ready FLAG OUT``: seconds, peak memory, size or error.

    ``--emit-training-artifacts`` runs without its own training step
    (``train-step=false``): the build is ``generate_artifacts`` alone, as a user calls it.
    """
    shutil.rmtree(out, ignore_errors=True)
    ready = out.parent / f"{out.name}-ready"  # the model graphpass writes (and its data)
    shutil.rmtree(ready, ignore_errors=True)
    ready.mkdir(parents=True)
    command = [python, "-m", "graphpass", "run", str(folder / "model.onnx"), "-o",
               str(ready / "ready.onnx"), "-p", "train-ready", flag,
               str(out), "--format", "json"]
    if flag == "--emit-training-artifacts":
        command += ["-O", "emit-training-artifacts.train-step=false"]
    child = run_child(command, cap, timeout=timeout)
    shutil.rmtree(ready, ignore_errors=True)
    result: dict[str, Any] = {"seconds": child.seconds, "peak_mb": child.peak_bytes / MB}
    if child.returncode != 0 or not out.is_dir():
        result["error"] = _report_errors(child.stdout) or _failure(child)
    else:
        result["directory_bytes"] = _directory_bytes(out)
    return result


def _report_errors(stdout: str) -> str:
    """The error findings of graphpass's JSON report (empty when there is none)."""
    try:
        report = json.loads(stdout)
    except ValueError:
        return ""
    found: list[str] = []

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("severity") == "error" and "message" in value:
                found.append(f"{value.get('code', '')} {value['message']}".strip())
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(report)
    return " / ".join(dict.fromkeys(found))[:1500]


def torch_adamw(path: Path) -> dict[str, Any]:
    """Set the ``AdamWOptimizer`` node of onnxruntime-training's optimizer model to
    ``torch.optim.AdamW``'s hyperparameters; the attributes it had.

    ``generate_artifacts(optimizer=OptimType.AdamW)`` writes eps 1e-6, weight decay 0
    and Hugging Face's variant (``adam_mode`` 1: the weight decay after the update, the
    bias corrections on the step size); torch's defaults are eps 1e-8, weight decay 0.01,
    ``adam_mode`` 0.
    """
    import onnx
    from onnx import helper

    model = onnx.load(str(path))
    wanted = {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-8, "weight_decay": 0.01,
              "adam_mode": 0, "correct_bias": 1}
    before: dict[str, Any] = {}
    for node in model.graph.node:
        if node.op_type != "AdamWOptimizer":
            continue
        kept = [a for a in node.attribute if a.name not in wanted]
        before = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        del node.attribute[:]
        node.attribute.extend(kept)
        node.attribute.extend(helper.make_attribute(k, v) for k, v in wanted.items())
    onnx.save(model, str(path))
    return {"generated": before, "set": wanted}


def measure_model(name: str, settings: Settings, spec: Spec | None = None,
                  runners: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Export, build and train ``name`` with every trainer; the model's record.

    The record is kept in the model's folder: a second call measures only the trainers
    the record lacks (all of them with ``--fresh``, or when the model or the step counts
    changed).
    """
    spec = spec or spec_of(settings.size, name)
    runners = runners or settings.runners
    folder = settings.cache / settings.size / name
    saved = folder / "measured.json"
    cached: dict[str, Any] = {}
    if saved.exists() and not settings.fresh:
        cached = json.loads(saved.read_text())
        if (cached.get("spec") != _spec_json(spec) or cached.get("steps") != settings.steps
                or cached.get("warmup") != settings.warmup):
            cached = {}
    missing = tuple(r for r in runners if r not in cached.get("trainers", {}))
    if cached and not missing:
        _log(f"{name}: measured before ({saved}); --fresh measures again")
        return cached
    if cached:
        _log(f"{name}: {', '.join(sorted(cached['trainers']))} measured before ({saved})")
    exported = ensure_export(spec, folder / "export", settings.cap)
    available_gb = available_bytes() / GB
    record: dict[str, Any] = {"model": name, "label": spec.label, "spec": _spec_json(spec),
                              "steps": settings.steps, "warmup": settings.warmup,
                              "export": exported, "builds": dict(cached.get("builds", {})),
                              "trainers": dict(cached.get("trainers", {}))}
    runners = missing
    if "error" in exported:
        _log(f"{name}: {exported['error']}")
        return record
    batch = folder / "export" / "batch.npz"
    for runner in runners:
        python = sys.executable
        if runner == "ort-training":
            if settings.ort_python is None:
                record["trainers"][runner] = {"error": "no .venv-ort-training (make ort-venv)"}
                continue
            python = settings.ort_python
        directory = folder / runner
        if runner != "torch":
            flag = ("--emit-training-graph" if runner == "graphpass"
                    else "--emit-training-artifacts")
            _log(f"{name}: building for {runner} ...")
            built = build(python, flag, folder / "export", directory, settings.cap,
                          settings.timeout)
            record["builds"][runner] = built
            if "error" in built:
                _log(f"{name}: {runner} build failed: {built['error'][:300]}")
                record["trainers"][runner] = {"error": "build failed"}
                continue
            if runner == "ort-training":
                built["optimizer"] = torch_adamw(directory / "optimizer_model.onnx")
            _log(f"{name}: {runner} built in {built['seconds']:.1f} s, "
                 f"{built['peak_mb']:.0f} MB peak, {built['directory_bytes'] / MB:.0f} MiB")
        _log(f"{name}: training with {runner} ...")
        job = {"runner": runner, "directory": str(directory), "batch": str(batch),
               "spec": _spec_json(spec), "steps": settings.steps, "warmup": settings.warmup}
        child = _worker(python, "train", job, folder, settings.cap, settings.timeout)
        if child.returncode != 0:
            record["trainers"][runner] = {"error": _failure(child),
                                          "peak_mb": child.peak_bytes / MB}
            _log(f"{name}: {runner}: {record['trainers'][runner]['error'][:300]}")
        else:
            record["trainers"][runner] = child.result()
            measured = record["trainers"][runner]
            _log(f"{name}: {runner}: {measured['step_s']:.3f} s a step, "
                 f"{measured['peak_mb']:.0f} MB peak, losses "
                 + ", ".join(f"{x:.6g}" for x in measured["losses"][:3]))
    _compare(record)
    record["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    record["available_gb_before"] = available_gb
    record["load_average_after"] = list(os.getloadavg())
    saved.write_text(json.dumps(record, indent=1))
    return record


def _compare(record: dict[str, Any], first: int = 3) -> None:
    """Each trainer's largest relative difference to torch's losses over the first steps."""
    torch = record["trainers"].get("torch", {}).get("losses")
    if not torch:
        return
    for measured in record["trainers"].values():
        losses = measured.get("losses")
        if losses:
            pairs = list(zip(losses[:first], torch[:first], strict=False))
            measured["loss_rel_diff"] = max(abs(a - b) / max(abs(b), 1e-30) for a, b in pairs)


def machine_rates(settings: Settings) -> dict[str, Any]:
    """onnxruntime's and torch's float32 MatMul rates (2048 x 2048 unless the settings
    say otherwise), 2 threads."""
    rates: dict[str, Any] = {}
    for runner in ("onnxruntime", "torch"):
        job = {"runner": runner, "n": settings.matmul_size, "repeats": 10}
        child = _worker(sys.executable, "matmul", job, settings.cache, settings.cap)
        rates[runner] = (child.result()["gflops"] if child.returncode == 0
                         else {"error": _failure(child)})
        _log(f"MatMul {settings.matmul_size}^2 float32 in {runner}: {rates[runner]} GFLOP/s")
    return rates


def _tier_record(settings: Settings, spec: Spec, runner: str) -> dict[str, Any] | None:
    """The tier's own ``llama-1b`` record where ``spec`` is its model and it holds
    ``runner``'s steps (at least 2): a probe of the same size need not run again."""
    saved = settings.cache / settings.size / "llama-1b" / "measured.json"
    if settings.fresh or not saved.exists():
        return None
    record: dict[str, Any] = json.loads(saved.read_text())
    if record["spec"]["config"] != spec.config or runner not in record["trainers"]:
        return None
    _log(f"largest: {runner}: the tier's llama-1b has these layers; its record is used")
    return record


def probe_largest(settings: Settings, layers: list[int]) -> dict[str, Any]:
    """The most Llama layers (hidden 2048, batch 1 x 128) that torch and graphpass train
    2 steps under the memory cap, probing ``layers`` in order until one does not fit."""
    probe = Settings(settings.size, settings.cache / "largest", 0, 2, settings.cap,
                     settings.fresh, settings.runners, settings.ort_python,
                     matmul_size=settings.matmul_size, timeout=settings.timeout)
    found: dict[str, Any] = {"layers_tried": layers, "cap_gb": settings.cap / GB,
                             "config": spec_of(settings.size, "llama-1b").config,
                             "batch": list(spec_of(settings.size, "llama-1b").input_shape),
                             "runs": {}, "largest": {}}
    for runner in (r for r in ("torch", "graphpass") if r in settings.runners):
        for count in layers:
            spec = spec_of(settings.size, "llama-1b", count)
            _log(f"largest: {runner} at {count} layers ...")
            record = _tier_record(settings, spec, runner)
            if record is None:
                record = measure_model(f"llama-{count}-layers", probe, spec, (runner,))
            measured = record["trainers"].get(runner) or {"error": record["export"].get("error")}
            params = record["export"].get("parameters")
            fits = "losses" in measured and len(measured["losses"]) >= 2
            found["runs"].setdefault(runner, []).append({
                "layers": count, "parameters": params, "fits": fits,
                "peak_mb": measured.get("peak_mb"), "error": measured.get("error"),
                "build": record["builds"].get(runner)})
            if settings.size == "full":  # gigabytes each: the record is what is kept
                probed = probe.cache / probe.size / f"llama-{count}-layers"
                shutil.rmtree(probed / runner, ignore_errors=True)
                if runner == "graphpass":  # the last to probe this size (torch runs first)
                    shutil.rmtree(probed / "export", ignore_errors=True)
            if not fits:
                break
            found["largest"][runner] = {"layers": count, "parameters": params}
    return found


def run(names: list[str], settings: Settings, largest: list[int] | None) -> dict[str, Any]:
    """The whole tier; the record."""
    import numpy

    record: dict[str, Any] = {
        "size": settings.size, "steps": settings.steps, "warmup": settings.warmup,
        "threads": THREADS, "lr": LR, "memory_cap_gb": settings.cap / GB,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "memory_gb": _total_memory() / GB,
                    "platform": platform.platform(), "python": platform.python_version(),
                    "numpy": numpy.__version__},
        "notes": settings.notes, "models": {}}
    if settings.rates_from:
        earlier = json.loads(Path(settings.rates_from).read_text())["machine"]
        record["machine"]["matmul_gflops"] = earlier["matmul_gflops"]
        record["machine"]["matmul_measured"] = f"{earlier.get('date')} ({settings.rates_from})"
    else:
        record["machine"]["matmul_gflops"] = machine_rates(settings)
    record["machine"]["matmul_size"] = settings.matmul_size
    try:
        import onnxruntime

        record["machine"]["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    for name in names:
        record["models"][name] = measure_model(name, settings)
    if largest:
        record["largest"] = probe_largest(settings, largest)
    return record


def _total_memory() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return 0


# ------------------------------------------------------------------------------- docs
def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e6 else f"{n:,}"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a is not None and b else "-"


def _cell(measured: dict[str, Any], key: str, fmt: str) -> str:
    value = measured.get(key)
    if value is None:
        return "fails" if "error" in measured else "-"
    return fmt.format(value)


def docs_lines(record: dict[str, Any]) -> list[str]:
    """The "Real sizes" section of docs/benchmarks.md, from a record of :func:`run`."""
    rates = record["machine"].get("matmul_gflops", {})
    ort_rate = rates.get("onnxruntime") if isinstance(rates.get("onnxruntime"), float) else None
    torch_rate = rates.get("torch") if isinstance(rates.get("torch"), float) else None
    size = record["machine"].get("matmul_size", 2048)
    lines = [
        "## Real sizes", "",
        "`benchmarks/real_sizes.py` (issue 23): real model sizes, built locally by "
        "`transformers` with random init, exported with `torch.onnx.export(dynamo=True, "
        "optimize=False, external_data=True)`; MSE of the first output against a fixed "
        f"random target, AdamW (lr {record['lr']:g}, torch's defaults otherwise), "
        f"{record['threads']} threads; each trainer in its own process, one run "
        f"(recorded {record['date']}, {record['machine']['cpus']} CPUs, "
        f"{record['machine']['memory_gb']:.0f} GB shared with other jobs). **graphpass**: "
        "`graphpass run MODEL -o READY.onnx -p train-ready --emit-training-graph DIR`, then "
        "`graphpass.training.Trainer`; **torch**: eager, the same initial weights, "
        "`torch.optim.AdamW`; **ORT-training**: onnxruntime-training 1.19.2's "
        "`generate_artifacts` (through `--emit-training-artifacts`, without its check step) "
        "and `onnxruntime.training.api`, its `AdamWOptimizer` node set to torch's "
        "hyperparameters (`generate_artifacts` writes eps 1e-6, weight decay 0 and Hugging "
        "Face's variant, `adam_mode` 1: its losses drift 1e-3 from torch's by the second "
        "step).", "",
        f"Step time: the median of {record['steps']} steps after {record['warmup']} warm-up "
        "step(s). Peak memory: the kernel's peak resident memory (`VmHWM`, reset through "
        "`/proc/self/clear_refs` after the runtime's imports) less the resident memory then. "
        "Build: the wall time and peak resident memory of the `graphpass run` process. "
        "Directory: the training directory's bytes / the trainable weights' bytes. Losses: "
        "the largest relative difference of the first 3 losses to torch's. FLOP floor: "
        "3 x the forward's FLOPs (`torch.utils.flop_counter.FlopCounterMode`: matrix "
        "products, attention, convolutions) at onnxruntime's measured "
        f"{size} x {size} float32 MatMul rate "
        f"({ort_rate:.0f} GFLOP/s; torch: {torch_rate:.0f} GFLOP/s)."
        if ort_rate and torch_rate else "", ""]
    lines += ["| model (batch) | params | step: graphpass / torch / ORT-training | "
              "graphpass / torch | peak memory: graphpass / torch / ORT-training | "
              "memory graphpass / torch | build (graphpass) | directory / weights | "
              "losses vs torch: graphpass / ORT-training | step GFLOP | FLOP floor | "
              "graphpass / floor |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    failures: list[str] = []
    for model in record["models"].values():
        shape = " x ".join(str(d) for d in model["spec"]["input_shape"])
        exported = model["export"]
        if "error" in exported:
            lines.append(f"| {model['label']} ({shape}) | | {exported['error'][:200]} "
                         "| | | | | | | | | |")
            continue
        trainers = model["trainers"]
        ours, torch, ort = (trainers.get(r, {}) for r in ("graphpass", "torch", "ort-training"))
        built = model["builds"].get("graphpass", {})
        step_flops = 3 * sum(exported["forward_flops"].values())
        own_rate = model.get("matmul_gflops", {}).get("onnxruntime")  # a run of its own
        rate = own_rate if isinstance(own_rate, float) else ort_rate
        floor = step_flops / (rate * 1e9) if rate else None
        directory = built.get("directory_bytes")
        lines.append(
            f"| {model['label']} ({shape}) | {_count(exported['parameters'])} | "
            f"{_cell(ours, 'step_s', '{:.2f} s')} / {_cell(torch, 'step_s', '{:.2f} s')} / "
            f"{_cell(ort, 'step_s', '{:.2f} s')} | "
            f"**{_ratio(ours.get('step_s'), torch.get('step_s'))}** | "
            f"{_cell(ours, 'peak_mb', '{:,.0f} MB')} / {_cell(torch, 'peak_mb', '{:,.0f} MB')}"
            f" / {_cell(ort, 'peak_mb', '{:,.0f} MB')} | "
            f"**{_ratio(ours.get('peak_mb'), torch.get('peak_mb'))}** | "
            + (f"{built['seconds']:.1f} s, {built['peak_mb']:,.0f} MB | " if built else "- | ")
            + (f"{directory / MB:,.0f} MiB = {directory / exported['weight_bytes']:.2f}x | "
               if directory else "- | ")
            + f"{_cell(ours, 'loss_rel_diff', '{:.1e}')} / "
              f"{_cell(ort, 'loss_rel_diff', '{:.1e}')} | "
            + f"{step_flops / 1e9:,.4g} | "
            + (f"{floor:.2f} s | {_ratio(ours.get('step_s'), floor)} |" if floor else "- | - |"))
        for runner, measured in trainers.items():
            if "error" in measured:
                failures.append(f"- {model['label']}, {runner}: "
                                f"{measured['error'][:300].replace('|', '/')}")
            elif measured.get("losses"):
                failures.append(f"- {model['label']}, {runner}: losses "
                                + ", ".join(f"{x:.7g}" for x in measured["losses"][:3]))
        for runner, built_ in model["builds"].items():
            if "error" in built_:
                failures.append(f"- {model['label']}, {runner} build: "
                                f"{built_['error'][:300].replace('|', '/')}")
    if failures:
        lines += ["", "First losses and failures:", "", *failures]
    when = [f"{m['label']} {m['measured_at']} ({m['available_gb_before']:.1f} GB available "
            "before)" for m in record["models"].values() if m.get("measured_at")]
    if when:
        lines += ["", "Measured one model at a time, its trainers one after the other: "
                  + "; ".join(when) + "."]
    largest = record.get("largest")
    if largest:
        config = largest.get("config", LLAMA)
        batch = " x ".join(str(d) for d in largest.get("batch", (1, 128)))
        lines += ["", "Largest Llama-shaped model that trains 2 steps (hidden "
                  f"{config['hidden_size']}, {config['num_attention_heads']} heads, "
                  f"{config['num_key_value_heads']} KV heads, intermediate "
                  f"{config['intermediate_size']}, vocabulary {config['vocab_size']}, batch "
                  f"{batch}; the layers vary) under a "
                  f"{largest['cap_gb']:.1f} GB cap on resident memory:", ""]
        for runner in ("torch", "graphpass"):
            best = largest["largest"].get(runner)
            tried = ", ".join(
                f"{r['layers']} layers: " + (f"fits, {r['peak_mb']:,.0f} MB" if r["fits"]
                                             else (r.get("error") or "does not fit")
                                             .removeprefix("does not fit: ")
                                             .replace("killed, ", "does not fit: killed, "))
                for r in largest["runs"].get(runner, []))
            lines.append(f"- {runner}: " + (f"**{best['layers']} layers, "
                                            f"{best['parameters'] / 1e9:.2f}B parameters**"
                                            if best else "**none of those tried**")
                         + f" ({tried})")
    if record.get("notes"):
        lines += ["", *[f"Note: {note}" for note in record["notes"]]]
    return lines


def table(record: dict[str, Any]) -> str:
    """The record's docs section as Markdown text (what :func:`docs_lines` gives)."""
    return "\n".join(docs_lines(record))


# ------------------------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        job = json.loads(Path(sys.argv[3]).read_text())
        print(json.dumps(WORKERS[sys.argv[2]](job)), flush=True)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(FULL))
    sizes = parser.add_mutually_exclusive_group()
    sizes.add_argument("--small", action="store_true",
                       help="hidden 64, 2 layers: check the harness, measure nothing real")
    sizes.add_argument("--tiny", action="store_true", help="hidden 32, 1 layer (the test's)")
    parser.add_argument("--runners", default=",".join(RUNNERS))
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--matmul-size", type=int, default=2048,
                        help="the square MatMul that measures the machine's rate")
    parser.add_argument("--memory-cap-gb", type=float, default=22.0)
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds a build or a trainer may take before it is killed")
    parser.add_argument("--largest", action="store_true",
                        help="also probe the largest Llama that trains (slow)")
    parser.add_argument("--largest-layers", default="16,24,32",
                        help="the layer counts --largest tries, in order")
    parser.add_argument("--export-only", action="store_true",
                        help="only export the models into the cache (for a later run)")
    parser.add_argument("--rates-from", metavar="RECORD",
                        help="take the MatMul rates from this record (the run that measured "
                             "the models cached) instead of measuring them again")
    parser.add_argument("--cache", default=str(CACHE))
    parser.add_argument("--fresh", action="store_true",
                        help="measure again what the cache holds (the exports stay)")
    parser.add_argument("--json", help=f"where the record goes (default {RESULTS}; "
                                       "real_sizes_SIZE.json for --small and --tiny)")
    parser.add_argument("--note", action="append", default=[],
                        help="a note to keep in the record and the docs")
    parser.add_argument("--no-docs", action="store_true",
                        help="do not update docs/benchmarks.md")
    parser.add_argument("--from-json", metavar="RECORD",
                        help="measure nothing: write the docs section from this record")
    args = parser.parse_args()
    if args.from_json:
        write_docs_section(SECTION, docs_lines(json.loads(Path(args.from_json).read_text())))
        return 0
    size = "small" if args.small else "tiny" if args.tiny else "full"
    runners = tuple(r for r in args.runners.split(",") if r)
    ort_python = ort_training_python()
    notes = list(args.note)
    if "ort-training" in runners and ort_python is None:
        notes.append("no .venv-ort-training here (make ort-venv): ORT-training left out")
    settings = Settings(size, Path(args.cache), args.steps, args.warmup,
                        int(args.memory_cap_gb * GB), args.fresh, runners, ort_python, notes,
                        args.matmul_size, args.timeout, args.rates_from)
    names = [n for n in args.models.split(",") if n]
    unknown = set(names) - set(FULL)
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; known: {', '.join(FULL)}")
    if args.export_only:
        for name in names:
            exported = ensure_export(spec_of(size, name), settings.cache / size / name / "export",
                                     settings.cap)
            _log(f"{name}: " + (exported["error"] if "error" in exported else
                                f"exported, {exported['parameters']:,} parameters"))
        return 0
    largest = ([int(n) for n in args.largest_layers.split(",")] if args.largest else None)
    record = run(names, settings, largest)
    path = Path(args.json) if args.json else (
        RESULTS if size == "full" else RESULTS.with_name(f"real_sizes_{size}.json"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(table(record))
    print(f"record: {path}")
    if size == "full" and not args.no_docs:
        write_docs_section(SECTION, docs_lines(record))
    return 0


if __name__ == "__main__":
    sys.exit(main())
