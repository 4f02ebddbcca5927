"""The corpus on which ``lint-gradients`` is checked against onnxruntime-training.

Two sources:

* ONNX's node test cases (``onnx.backend.test.case.node.collect_testcases()``): for
  every float input of a test model, one case where that input becomes a trainable
  initializer (holding the test's input data), and the first output, summed to a
  float32 scalar, is the loss.
* small torch modules exported with both exporters (see ``torch_cases``).

onnxruntime-training 1.19.2 accepts ai.onnx opsets up to 21 and IR versions up to 10:
newer models are converted down (``onnx.version_converter``) or skipped, and the
reason is kept. Verdicts are plain strings so that a golden file stays small:

* ``ok``: training artifacts are built.
* ``missing OP``: no gradient builder for ``OP``.
* ``broken OP``: a known failure condition of ``OP`` (``broken A|B`` when the
  trainer's message fits several).
* ``unreachable W`` / ``no-gradient W`` / ``duplicate W`` / ``captured W``: the
  trainable weight ``W`` gets no gradient, two at once, or is read in a subgraph
  (the lint's GP402, GP404, GP405, GP406); ``W1|W2`` when several weights share the
  problem (the trainer names one of them, in no fixed order).
* ``loss-type``: the loss is not float32 (GP407).
* ``other: ...`` / ``crash: ...``: the trainer fails for another reason.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphpass.framework import default_registry
from graphpass.torch import TRAINABLE_TYPES

MAX_OPSET = 21
MAX_IR = 10
FLOAT_TYPES = TRAINABLE_TYPES
LOSS_NAME = "gp_loss"
ORACLE = Path(__file__).with_name("oracle.py")
PREDICTABLE = ("ok", "missing", "broken", "unreachable", "no-gradient", "duplicate", "captured",
               "loss-type")


@dataclass
class Case:
    """One model to judge: trainable weights and the loss output.

    Attributes:
        name: A stable case name (``test_relu[x]``).
        model: The model.
        trainable: The trainable initializers.
        loss: The loss output(s) (ORT uses the first).
        changes: What was changed to make the model acceptable to the trainer.
        feeds: The model's inputs (a node test's data), by name; empty when unknown.
    """

    name: str
    model: onnx.ModelProto
    trainable: list[str]
    loss: list[str]
    frozen: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    feeds: dict[str, Any] = field(default_factory=dict)


@dataclass
class Skipped:
    """A test case left out of the corpus, and why."""

    name: str
    reason: str


def _default_opset(model: onnx.ModelProto) -> int | None:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return None


def _fit_versions(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """Bring a model within the trainer's opset/IR limits (raises ValueError if impossible)."""
    changes = []
    opset = _default_opset(model)
    if opset is not None and opset > MAX_OPSET:
        from onnx import version_converter

        try:
            model = version_converter.convert_version(model, MAX_OPSET)
        except Exception as error:
            reason = str(error).strip().splitlines()[0][:120]
            raise ValueError(f"opset {opset} cannot be converted to {MAX_OPSET}: {reason}") \
                from None
        changes.append(f"opset {opset}->{MAX_OPSET}")
    if model.ir_version > MAX_IR:
        changes.append(f"ir {model.ir_version}->{MAX_IR}")
        model.ir_version = MAX_IR
    try:
        onnx.checker.check_model(model)
    except Exception as error:
        raise ValueError(f"not valid after the version change: {str(error)[:120]}") from None
    return model, changes


def _is_float_tensor(info: onnx.ValueInfoProto) -> bool:
    return (info.type.WhichOneof("value") == "tensor_type"
            and info.type.tensor_type.elem_type in FLOAT_TYPES)


def add_scalar_loss(model: onnx.ModelProto) -> str:
    """Make the first output a scalar float32 loss: ``gp_loss = ReduceSum(first output)``.

    A float output of another precision is cast to float32 first (ORT seeds the loss
    gradient with a float32 1.0). A non-float first output is left as it is: the
    trainer cannot differentiate it. Returns the loss output's name.
    """
    first = model.graph.output[0]
    if not _is_float_tensor(first):
        return first.name
    if _default_opset(model) is None:
        model.opset_import.add(domain="", version=MAX_OPSET)
    source = first.name
    if first.type.tensor_type.elem_type != TensorProto.FLOAT:
        source = f"{first.name}_as_float"
        model.graph.node.append(helper.make_node("Cast", [first.name], [source],
                                                 to=TensorProto.FLOAT, name="gp_loss_cast"))
    # ReduceSum without axes sums everything at every opset.
    model.graph.node.append(helper.make_node("ReduceSum", [source], [LOSS_NAME], keepdims=0,
                                             name="gp_loss_sum"))
    model.graph.output.insert(0, helper.make_tensor_value_info(LOSS_NAME, TensorProto.FLOAT, []))
    return LOSS_NAME


def node_test_cases(names: Iterable[str] | None = None, *, cache: Path | None = None
                    ) -> tuple[list[Case], list[Skipped]]:
    """Cases from ONNX's node tests: each float input in turn becomes the trainable weight.

    Args:
        names: Restrict to these case names (``test_relu[x]``) or test names.
        cache: A folder to keep the whole corpus in (building it takes ~20 s: the
            test data generators and the version converter); ignored with ``names``.
    """
    if cache is not None and names is None:
        import os
        import pickle
        import tempfile

        path = Path(cache) / _cache_key(with_torch=False) / "node_cases.pickle"
        if path.exists():
            with path.open("rb") as handle:
                cached: tuple[list[Case], list[Skipped]] = pickle.load(handle)
            return cached
        built = node_test_cases()
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, delete=False) as handle:
            pickle.dump(built, handle, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(handle.name, path)
        return built
    from onnx.backend.test.case.node import collect_testcases

    wanted = set(names) if names is not None else None
    cases: list[Case] = []
    skipped: list[Skipped] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tests = collect_testcases()
    for test in tests:
        if test.model is None or not test.data_sets:
            continue
        inputs = test.model.graph.input
        data = test.data_sets[0][0]
        float_inputs = [(index, info) for index, info in enumerate(inputs)
                        if _is_float_tensor(info) and index < len(data)]
        names_here = [f"{test.name}[{info.name}]" for _, info in float_inputs]
        if wanted is not None and test.name not in wanted \
                and not wanted.intersection(names_here):
            continue
        if not float_inputs:
            skipped.append(Skipped(test.name, "no float tensor input"))
            continue
        try:
            base, changes = _fit_versions(copy.deepcopy(test.model))
        except ValueError as error:
            skipped.extend(Skipped(name, str(error)) for name in names_here)
            continue
        for (index, info), case_name in zip(float_inputs, names_here, strict=True):
            if wanted is not None and test.name not in wanted and case_name not in wanted:
                continue
            array = data[index]
            if isinstance(array, TensorProto):  # types numpy lacks (bfloat16, float8 ...)
                initializer = TensorProto()
                initializer.CopyFrom(array)
                initializer.name = info.name
            elif isinstance(array, (np.ndarray, np.generic)):
                initializer = numpy_helper.from_array(np.asarray(array), info.name)
            else:
                skipped.append(Skipped(case_name, "input data is not a tensor"))
                continue
            model = copy.deepcopy(base)
            position = [i.name for i in model.graph.input].index(info.name)
            del model.graph.input[position]
            model.graph.initializer.append(initializer)
            case_changes = list(changes)
            if model.ir_version < 4:  # before IR 4 an initializer must also be an input
                case_changes.append(f"ir {model.ir_version}->4")
                model.ir_version = 4
            loss = add_scalar_loss(model)
            feeds = {other.name: data[i] for i, other in enumerate(inputs)
                     if i != index and i < len(data)}
            cases.append(Case(case_name, model, [info.name], [loss], changes=case_changes,
                              feeds=feeds))
    return cases, skipped


# --------------------------------------------------------------------------- verdicts
_WEIGHT_IN_MESSAGE: Mapping[str, str] = {
    "no-gradient": r"failed to find NodeArg by name: (\S+)_grad\b",
    "duplicate": r"Duplicate definition of name \((\S+)_grad\)",
    "captured": r"does not exist:(\S+?) ?for node",
}


def ort_verdict(result: Mapping[str, Any], rules: Any) -> str:
    """Classify an oracle result, recognising messages by the rule set's patterns.

    Args:
        result: One JSON object from ``oracle.py``.
        rules: The :class:`graphpass.GradientRules` (its ``trainer_message``
            patterns attribute a builder failure to an operator).
    """
    if result.get("ok"):
        return "ok"
    error = str(result.get("error") or "")
    if result.get("crashed"):
        return "crash: " + _short(error)
    if result.get("missing_gradient_op"):
        return f"missing {result['missing_gradient_op']}"
    if result.get("unreachable_weight"):
        return f"unreachable {result['unreachable_weight']}"
    for failure in rules.trainer_failures:
        if failure.trainer_message and re.search(failure.trainer_message, error):
            if failure.kind == "loss-type":
                return "loss-type"
            found = re.search(_WEIGHT_IN_MESSAGE.get(failure.kind, "$^"), error)
            return f"{failure.kind} {found.group(1)}" if found else failure.kind
    broken = sorted({failure.op_type for failure in rules.op_failures
                     if failure.trainer_message and re.search(failure.trainer_message, error)})
    if broken:
        return "broken " + "|".join(broken)
    return "other: " + _short(error)


def _short(error: str) -> str:
    """The distinctive part of a trainer message, without C++ signatures and paths."""
    text = error.strip().splitlines()[-1] if error.strip() else ""
    text = re.sub(r"/onnxruntime_src/\S+ ", "", text)
    if "Assertion" in text:
        return text[text.index("Assertion"):][:120]
    for marker in (": FAIL :", "INVALID_ARGUMENT :", "INVALID_GRAPH :", "was false."):
        if marker in text:
            return text.split(marker, 1)[1].strip()[:120]
    if "::" in text and ") " in text:  # "RuntimeError: <C++ signature>) message"
        text = text.rsplit(") ", 1)[1]
    return text.strip()[:120]


_VERDICT_OF_CODE: Mapping[str, str] = {
    "GP401": "missing", "GP410": "missing", "GP403": "broken", "GP402": "unreachable",
    "GP404": "no-gradient", "GP405": "duplicate", "GP406": "captured", "GP407": "loss-type",
}


def lint_verdict(findings: Sequence[Any]) -> str:
    """The verdict the lint predicts: from its first error outside function bodies.

    For a weight-level problem, every weight with the same problem is listed
    (``captured a|b``): the trainer names one of them, in no fixed order.
    """
    errors = [f for f in findings if str(f.severity) == "error" and f.function is None
              and f.code in _VERDICT_OF_CODE]
    if not errors:
        return "ok"
    first = errors[0]
    kind_ = _VERDICT_OF_CODE[first.code]
    if kind_ == "missing":
        return f"missing {first.data['op_type']}"
    if kind_ == "broken":
        return f"broken {first.data['rule_op']}"
    if kind_ == "loss-type":
        return "loss-type"
    weights = dict.fromkeys(f.value for f in errors if f.code == first.code)
    return f"{kind_} " + "|".join(str(w) for w in weights)


def same(ort: str, lint: str) -> bool:
    """Whether the verdicts agree (``kind a|b`` stands for any of the alternatives)."""
    ort_kind, _, ort_what = ort.partition(" ")
    lint_kind, _, lint_what = lint.partition(" ")
    if ort_kind != lint_kind:
        return False
    if not ort_what and not lint_what:
        return True
    return bool(set(ort_what.split("|")) & set(lint_what.split("|")))


def kind(verdict: str) -> str:
    """``ok``, ``fails`` (a predictable failure), or ``other`` (crash / other reason)."""
    if verdict == "ok":
        return "ok"
    head = verdict.split(" ", 1)[0]
    return "fails" if head in PREDICTABLE else "other"


def confusion(pairs: Iterable[tuple[str, str]]) -> dict[str, int]:
    """Count (trainer, lint) verdict pairs: agreement, and the ways they disagree."""
    counts = {"ort ok / lint ok": 0, "ort ok / lint fails": 0, "ort fails / lint ok": 0,
              "ort fails / lint fails, same": 0, "ort fails / lint fails, different": 0}
    for ort, lint in pairs:
        if kind(ort) == "other":
            continue
        if kind(ort) == "ok":
            counts["ort ok / lint ok" if lint == "ok" else "ort ok / lint fails"] += 1
        elif lint == "ok":
            counts["ort fails / lint ok"] += 1
        elif same(ort, lint):
            counts["ort fails / lint fails, same"] += 1
        else:
            counts["ort fails / lint fails, different"] += 1
    return counts


def lint_findings(case: Case) -> list[Any]:
    """The findings of ``lint-gradients`` on a case (its trainable, frozen and loss).

    The oracle differentiates the model's first output itself (``loss = none``: no loss
    block is added), hence ``loss_added = False``.
    """
    import graphpass
    from graphpass.passes.lint_gradients import LintGradients

    model = graphpass.Model.from_proto(case.model)
    options = {"trainable": case.trainable, "frozen": case.frozen, "loss": case.loss,
               "loss_added": False}
    context = graphpass.PassContext(registry=default_registry())
    return LintGradients(options).run(model, context).findings


def default_ort_python() -> str:
    """The onnxruntime-training venv's Python: ``$GRAPHPASS_ORT_TRAINING_PYTHON``, else the
    repository's ``.venv-ort-training`` (``make ort-venv``)."""
    import os

    repository = Path(__file__).resolve().parents[2]
    return os.environ.get("GRAPHPASS_ORT_TRAINING_PYTHON",
                          str(repository / ".venv-ort-training" / "bin" / "python"))


def run_oracle(python: str, jobs: Iterable[Mapping[str, Any]], folder: Path, *,
               timeout: float | None = None) -> dict[Any, dict[str, Any]]:
    """Run ``oracle.py --batch`` on ``jobs`` with ``python``; its results by job ``id``.

    The job and result files go in ``folder``.
    """
    import json
    import subprocess

    jobs_path, results_path = folder / "jobs.jsonl", folder / "results.jsonl"
    jobs_path.write_text("".join(json.dumps(job) + "\n" for job in jobs), encoding="utf-8")
    subprocess.run([python, str(ORACLE), "--batch", str(jobs_path), "--out", str(results_path)],
                   check=True, capture_output=True, timeout=timeout)
    results = map(json.loads, results_path.read_text(encoding="utf-8").splitlines())
    return {result["id"]: result for result in results}


def ask_oracle(python: str, model: Path | str, *arguments: str,
               timeout: float = 600) -> dict[str, Any]:
    """Run ``oracle.py MODEL ARGUMENTS...`` with ``python``; the JSON object it prints."""
    import json
    import subprocess

    done = subprocess.run([python, str(ORACLE), str(model), *arguments],
                          capture_output=True, text=True, check=False, timeout=timeout)
    verdict: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return verdict


def iter_jobs(cases: Iterable[Case], directory: str, *, check_gradient: bool = False
              ) -> Iterator[dict[str, Any]]:
    """Save each case's model under ``directory`` and yield an oracle batch job for it.

    With ``check_gradient``, a case whose inputs are all numpy arrays also has them
    saved, and the job asks for ORT's gradient against finite differences.
    """
    import os

    for number, case in enumerate(cases):
        path = os.path.join(directory, f"case{number:05d}.onnx")
        onnx.save(case.model, path)
        job = {"id": case.name, "model": path, "requires_grad": case.trainable,
               "frozen": case.frozen, "loss": "none"}
        if check_gradient and all(isinstance(v, (np.ndarray, np.generic))
                                  for v in case.feeds.values()):
            inputs = os.path.join(directory, f"case{number:05d}.npz")
            np.savez(inputs, **{name: np.asarray(v) for name, v in case.feeds.items()})
            job.update(check_gradient=True, inputs=inputs)
        yield job


# ----------------------------------------------------------------------- torch cases
def _torch_modules() -> dict[str, tuple[Any, tuple[Any, ...]]]:
    """Small modules covering common layers: name -> (module, example inputs).

    Exporters (see ``_TORCH_EXPORTS``): ``legacy`` (``dynamo=False``, opset 17),
    ``legacy14`` (opset 14, where layer norm is decomposed), ``dynamo``
    (``dynamo=True``, opset 18), ``functions`` (legacy, opset 17,
    ``export_modules_as_functions`` for the ``Block`` modules).
    """
    import torch
    from torch import nn
    from torch.nn import functional as F

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.relu(self.fc(x)) + x

    class Blocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first, self.second = Block(), Block()
            self.head = nn.Linear(8, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.second(self.first(x)))

    class MLPNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.norm, self.fc2 = nn.Linear(8, 16), nn.LayerNorm(16), nn.Linear(16, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc2(F.gelu(self.norm(self.fc1(x))))

    class ConvNet(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)
            self.fc = nn.Linear(4 * 4 * 4, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
            return self.fc(torch.flatten(x, 1))

    class Embed(nn.Module):
        def __init__(self, tied: bool = False) -> None:
            super().__init__()
            self.emb, self.fc, self.tied = nn.Embedding(20, 8), nn.Linear(8, 8), tied

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            h = self.fc(self.emb(ids))
            return h @ self.emb.weight.t() if self.tied else h.mean(1)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x, need_weights=False)[0]

    class Recurrent(nn.Module):
        def __init__(self, cell: type[nn.Module]) -> None:
            super().__init__()
            self.rnn, self.fc = cell(8, 16, batch_first=True), nn.Linear(16, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(self.rnn(x)[0][:, -1])

    class RMSNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight, self.fc = nn.Parameter(torch.ones(8)), nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
            return self.fc(x)

    class Head(nn.Module):
        """A linear layer followed by one operation under test."""

        def __init__(self, op: Any) -> None:
            super().__init__()
            self.fc, self.op = nn.Linear(8, 8), op

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.op(self.fc(x))

    class ConvHead(nn.Module):
        def __init__(self, op: Any, channels: int = 3) -> None:
            super().__init__()
            self.conv, self.op = nn.Conv2d(channels, 4, 3, padding=1), op

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.op(self.conv(x))

    class Squared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.rand(8, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ (self.w * self.w)

    class FrozenBranch(nn.Module):
        """A cumulative sum (no ORT gradient) on a frozen weight only: off the path."""

        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.table = nn.Parameter(torch.rand(8), requires_grad=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x) + torch.cumsum(self.table, 0)

    class Cond(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.cond(x.sum() > 0, self.fc, lambda t: self.fc(t) - 1.0, (x,))

    x8 = (torch.randn(2, 8),)
    seq = (torch.randn(2, 5, 8),)
    image = (torch.randn(2, 3, 8, 8),)
    ids = (torch.randint(0, 20, (2, 5)),)
    transformer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    return {
        "mlp": (nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4),
                              nn.LogSoftmax(-1)), x8),
        "mlp_layernorm_gelu": (MLPNorm(), x8),
        "convnet_batchnorm": (ConvNet(), image),
        "embedding": (Embed(), ids),
        "embedding_tied": (Embed(tied=True), ids),
        "attention": (Attention(), seq),
        "transformer_layer": (transformer, seq),
        "lstm": (Recurrent(nn.LSTM), seq),
        "gru": (Recurrent(nn.GRU), seq),
        "rmsnorm": (RMSNorm(), x8),
        "amax": (Head(lambda t: t.amax(-1)), x8),
        "cumsum": (Head(lambda t: torch.cumsum(t, 1)), x8),
        "topk": (Head(lambda t: torch.topk(t, 3).values), x8),
        "clamp_where": (Head(lambda t: torch.where(t > 0, t.clamp(min=0.1), -t)), x8),
        "softplus": (Head(F.softplus), x8),
        "elu": (Head(F.elu), x8),
        "silu": (Head(F.silu), x8),
        "hardtanh": (Head(F.hardtanh), x8),
        "tanh_sigmoid": (Head(lambda t: torch.tanh(t) * torch.sigmoid(t)), x8),
        "reflect_pad": (ConvHead(lambda t: F.pad(t, (1, 1, 1, 1), mode="reflect")), image),
        "upsample": (ConvHead(lambda t: F.interpolate(t, scale_factor=2.0)), image),
        "avgpool": (ConvHead(lambda t: F.adaptive_avg_pool2d(F.avg_pool2d(t, 2), 1)), image),
        "conv_transpose": (nn.ConvTranspose2d(3, 2, 3, stride=2), image),
        "groupnorm": (ConvHead(nn.GroupNorm(2, 4)), image),
        "squared_weight": (Squared(), x8),
        "frozen_branch": (FrozenBranch(), x8),
        "cond": (Cond(), x8),
        "blocks": (Blocks(), x8),
    }


_EXPORTERS: Mapping[str, dict[str, Any]] = {
    "legacy": {"dynamo": False, "opset_version": 17},
    "legacy14": {"dynamo": False, "opset_version": 14},
    "dynamo": {"dynamo": True, "opset_version": 18},
    "functions": {"dynamo": False, "opset_version": 17},
}


def _cache_key(with_torch: bool = True) -> str:
    """A key of the code that builds the cases and the versions of the libraries it uses."""
    import hashlib
    import inspect

    parts = [onnx.__version__, np.__version__, inspect.getsource(add_scalar_loss)]
    if with_torch:
        import torch

        parts += [torch.__version__, inspect.getsource(_torch_modules),
                  inspect.getsource(_export), repr(_EXPORTERS), repr(_TORCH_EXPORTS)]
    else:
        parts += [inspect.getsource(node_test_cases), inspect.getsource(_fit_versions)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _export(module: Any, inputs: tuple[Any, ...], exporter: str,
            path: Path) -> dict[str, list[str]]:
    """Export one module; returns its trainable and frozen initializer names."""
    import contextlib
    import io

    import torch

    kwargs = dict(_EXPORTERS[exporter])
    if exporter == "functions":
        block = next(type(m) for m in module.modules() if type(m).__name__ == "Block")
        kwargs["export_modules_as_functions"] = {block}
    module.eval()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), \
            contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(module, inputs, str(path), **kwargs)
    model = onnx.load(str(path), load_external_data=True)
    onnx.save(model, str(path))  # one self-contained file
    parameters = {n for n, p in module.named_parameters() if p.requires_grad}
    frozen_parameters = {n for n, p in module.named_parameters() if not p.requires_grad}
    buffers = {n for n, _ in module.named_buffers()}
    trainable, frozen = [], []
    for tensor in model.graph.initializer:
        if tensor.data_type not in FLOAT_TYPES:
            continue
        if tensor.name in parameters:
            trainable.append(tensor.name)
        elif tensor.name in frozen_parameters:
            frozen.append(tensor.name)
        elif exporter != "dynamo" and tensor.name not in buffers:
            trainable.append(tensor.name)  # a parameter the legacy exporter folded/renamed
    return {"trainable": trainable, "frozen": frozen}


def torch_cases(cache: Path, names: Iterable[str] | None = None
                ) -> tuple[list[Case], list[Skipped]]:
    """Torch exports (cached under ``cache``): the first output, summed, is the loss.

    An export that fails is skipped (and remembered in the cache, with its reason).
    """
    import json
    import os
    import tempfile

    folder = Path(cache) / _cache_key()
    wanted = set(names) if names is not None else None
    cases: list[Case] = []
    skipped: list[Skipped] = []
    modules: dict[str, tuple[Any, tuple[Any, ...]]] | None = None
    for name, exporters in _TORCH_EXPORTS.items():
        for exporter in exporters:
            case_name = f"torch_{name}[{exporter}]"
            if wanted is not None and case_name not in wanted:
                continue
            path = folder / f"{name}.{exporter}.onnx"
            meta = folder / f"{name}.{exporter}.json"
            if not meta.exists():
                if modules is None:
                    modules = _torch_modules()
                module, inputs = modules[name]
                folder.mkdir(parents=True, exist_ok=True)
                with tempfile.TemporaryDirectory(dir=folder) as scratch:
                    tmp = Path(scratch) / path.name
                    try:
                        info = _export(module, inputs, exporter, tmp)
                        os.replace(tmp, path)
                    except Exception as error:  # an exporter limitation: note it and go on
                        info = {"failed": f"{type(error).__name__}: {error}"[:200]}
                    (Path(scratch) / meta.name).write_text(json.dumps(info))
                    os.replace(Path(scratch) / meta.name, meta)
            info = json.loads(meta.read_text())
            if "failed" in info:
                skipped.append(Skipped(case_name, f"export failed: {info['failed']}"))
                continue
            model = onnx.load(str(path))
            loss = add_scalar_loss(model)
            cases.append(Case(case_name, model, info["trainable"], [loss], info["frozen"]))
    return cases, skipped


_TORCH_EXPORTS: Mapping[str, tuple[str, ...]] = {
    "mlp": ("legacy", "dynamo"),
    "mlp_layernorm_gelu": ("legacy", "legacy14", "dynamo"),
    "convnet_batchnorm": ("legacy", "dynamo"),
    "embedding": ("legacy", "dynamo"),
    "embedding_tied": ("legacy", "dynamo"),
    "attention": ("legacy", "dynamo"),
    "transformer_layer": ("legacy", "legacy14", "dynamo"),
    "lstm": ("legacy", "dynamo"),
    "gru": ("legacy", "dynamo"),
    "rmsnorm": ("legacy", "dynamo"),
    "amax": ("legacy", "dynamo"),
    "cumsum": ("legacy", "dynamo"),
    "topk": ("legacy", "dynamo"),
    "clamp_where": ("legacy", "dynamo"),
    "softplus": ("legacy", "dynamo"),
    "elu": ("legacy", "dynamo"),
    "silu": ("legacy", "dynamo"),
    "hardtanh": ("legacy", "dynamo"),
    "tanh_sigmoid": ("legacy", "dynamo"),
    "reflect_pad": ("legacy", "dynamo"),
    "upsample": ("legacy", "dynamo"),
    "avgpool": ("legacy", "dynamo"),
    "conv_transpose": ("legacy", "dynamo"),
    "groupnorm": ("legacy", "dynamo"),
    "squared_weight": ("legacy", "dynamo"),
    "frozen_branch": ("legacy", "dynamo"),
    "cond": ("dynamo",),
    "blocks": ("legacy", "functions"),
}
"""The torch cases (module name -> exporters), known without importing torch."""
