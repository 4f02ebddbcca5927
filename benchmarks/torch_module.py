"""graphpass.torch.Module in a torch AdamW loop, beside torch eager and torch.compile.

BERT-base (masked LM) and GPT-2 small (causal LM) at batch 4 x 64 tokens, each trainer in
its own fresh process (``--worker``), 2 threads: a few warm-up steps (graphpass exports
and torch.compile compiles there), then timed steps of the same loop:
``loss = model(input_ids=..., labels=...).loss; loss.backward(); clip; optimizer.step()``.
Reported: the median step's wall time, the peak resident memory over the timed steps
(``VmHWM`` reset after the warm-up) and over the whole run, and the losses (dropout off,
so the three trainers follow one trajectory).

Also the wrapper's own overhead on a tiny model: a step through ``graphpass.torch.Module``
against running its two onnxruntime sessions directly with the same bindings.

Usage::

    .venv/bin/python benchmarks/torch_module.py [--models bert,gpt2] [--steps 5]

The table goes into docs/benchmarks.md (section ``torch-module``) and
benchmarks/results/torch_module.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _bench import run_worker, write_docs_section

RESULTS = Path(__file__).resolve().parent / "results" / "torch_module.json"
TRAINERS = ("eager", "compile", "graphpass")
BATCH, TOKENS = 4, 64
WARMUP = 2


def _model(name: str) -> Any:
    import torch
    import transformers

    torch.manual_seed(0)
    if name == "bert":
        config = transformers.BertConfig(hidden_dropout_prob=0.0,
                                         attention_probs_dropout_prob=0.0)
        return transformers.BertForMaskedLM(config), config.vocab_size
    config = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                     use_cache=False)
    return transformers.GPT2LMHeadModel(config), config.vocab_size


def _peak_kib() -> int:
    text = Path("/proc/self/status").read_text()
    return int(text.split("VmHWM:")[1].split()[0])


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def worker(name: str, trainer: str, steps: int) -> dict[str, Any]:
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    model, vocab = _model(name)
    model.train()
    runner: Any = model
    if trainer == "compile":
        runner = torch.compile(model)
    elif trainer == "graphpass":
        import graphpass.torch

        runner = graphpass.torch.Module(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator().manual_seed(1)
    batches = [torch.randint(0, vocab, (BATCH, TOKENS), generator=generator)
               for _ in range(WARMUP + steps)]
    losses, times, phases = [], [], []
    for index, ids in enumerate(batches):
        if index == WARMUP:
            _reset_peak()
        start = time.perf_counter()
        loss = runner(input_ids=ids, labels=ids).loss
        forward_end = time.perf_counter()
        loss.backward()
        backward_end = time.perf_counter()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end = time.perf_counter()
        times.append(end - start)
        phases.append((forward_end - start, backward_end - forward_end, end - backward_end))
        losses.append(loss.item())
    peak_mb = _peak_kib() / 1024
    timed = phases[WARMUP:]
    record = {"model": name, "trainer": trainer, "step_s": statistics.median(times[WARMUP:]),
              "first_step_s": times[0], "peak_mb": peak_mb, "losses": losses,
              "forward_s": statistics.median(p[0] for p in timed),
              "backward_s": statistics.median(p[1] for p in timed),
              "update_s": statistics.median(p[2] for p in timed)}
    if trainer != "compile":  # after the timed steps: the matrix products' own time
        record["products_s"] = _products_seconds(trainer, model, batches[-1])
    return record


_PRODUCTS_TORCH = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                   "aten::_addmm_activation"}
_PRODUCTS_ORT = {"MatMul", "FusedMatMul", "Gemm", "FusedGemm"}


def _products_seconds(trainer: str, model: Any, ids: Any) -> float:
    """The kernel time of one step's matrix products (forward and backward), by profiling.

    torch's from its profiler (the self time of its GEMM operators), onnxruntime's from its
    own profile (the ``MatMul``/``Gemm`` kernels of the forward and backward runs). Every
    trainer computes these products; the smaller of the two libraries' times, plus the
    optimizer's, bounds any step from below.
    """
    import torch

    if trainer == "eager":
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            model(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)
        return sum(event.self_cpu_time_total for event in prof.key_averages()
                   if event.key in _PRODUCTS_TORCH) / 1e6
    import graphpass.torch
    from graphpass.torch._module._program import module_session_options

    with tempfile.TemporaryDirectory() as folder:
        options = module_session_options()
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(folder) / "profile")
        profiled = graphpass.torch.Module(model, session_options=options)
        for _ in range(4):  # the first call exports; the next ones warm the allocations
            profiled(input_ids=ids, labels=ids).loss.backward()
        model.zero_grad(set_to_none=True)
        entry = next(iter(profiled._entries.values()))[0]
        program = next(iter(entry.programs.values()))
        profiles = [json.loads(Path(session.end_profiling()).read_text())
                    for session in (program.forward, program.backward)]
        program.inference.end_profiling()
    total = 0.0
    for events in profiles:
        runs = [e for e in events if e.get("cat") == "Session" and e["name"] == "model_run"]
        low, high = runs[-1]["ts"], runs[-1]["ts"] + runs[-1]["dur"]
        total += sum(e["dur"] for e in events if e.get("cat") == "Node"
                     and e["name"].endswith("_kernel_time") and low <= e["ts"] <= high
                     and e["args"].get("op_name") in _PRODUCTS_ORT) / 1e6
    return total


def overhead_worker(steps: int) -> dict[str, Any]:
    """A tiny model's step through the wrapper, against its two sessions run directly."""
    import warnings

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import graphpass.torch
    from graphpass.torch._module._binding import bind_input, bind_output_into

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    wrapped = graphpass.torch.Module(model)
    x = torch.randn(8, 16)
    wrapped(x).sum().backward()
    program = next(iter(next(iter(wrapped._entries.values()))[0].programs.values()))
    graphs = program.graphs

    def wrapped_step() -> None:
        wrapped(x).sum().backward()

    forward_names = graphs.forward_outputs
    grads = {name: torch.empty_like(program.weights[name]) for name in program.trainable}

    def direct_step() -> None:
        binding = program.forward.io_binding()
        held = [bind_input(binding, program.inputs[0], x)]
        held += [bind_input(binding, n, t) for n, t in program.weights.items()]
        for name in forward_names:
            binding.bind_output(name, "cpu")
        program.forward.run_with_iobinding(binding)
        values = dict(zip(forward_names, binding.get_outputs(), strict=True))
        back = program.backward.io_binding()
        for name in graphs.saved:
            back.bind_ortvalue_input(name, values[name])
        held += [bind_input(back, n, program.weights.get(n, x))
                 for n in graphs.backward_inputs]
        held.append(bind_input(back, graphs.seeded[graphs.outputs[0]], torch.ones(8, 4)))
        for name in program.trainable:
            output = graphs.gradients[name]
            if output is not None:
                bind_output_into(back, output, grads[name])
        program.backward.run_with_iobinding(back)

    result = {}
    for label, step in (("wrapped", wrapped_step), ("direct", direct_step)):
        for _ in range(50):
            step()
        runs = []
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(steps):
                step()
            runs.append((time.perf_counter() - start) / steps)
        result[label] = min(runs)
    result["overhead_ms"] = (result["wrapped"] - result["direct"]) * 1e3
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="bert,gpt2")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--worker", nargs="*")
    args = parser.parse_args()
    if args.worker is not None:
        if args.worker[0] == "overhead":
            print(json.dumps(overhead_worker(int(args.worker[1]))))
        else:
            print(json.dumps(worker(args.worker[0], args.worker[1], int(args.worker[2]))))
        return
    records: list[dict[str, Any]] = []
    for name in args.models.split(","):
        for trainer in TRAINERS:
            record = run_worker(__file__, name, trainer, str(args.steps))
            records.append(record)
            print(f"{name:5} {trainer:9} step {record['step_s']:.3f} s  peak "
                  f"{record['peak_mb']:.0f} MB  losses {record['losses'][:3]}", flush=True)
    overhead = run_worker(__file__, "overhead", "200")
    print(f"tiny model: wrapped {overhead['wrapped'] * 1e3:.3f} ms, direct "
          f"{overhead['direct'] * 1e3:.3f} ms, overhead {overhead['overhead_ms']:.3f} ms")
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({"records": records, "overhead": overhead}, indent=1))
    write_docs_section("torch-module", _table(records, overhead))


def _table(records: list[dict[str, Any]], overhead: dict[str, Any]) -> list[str]:
    by = {(r["model"], r["trainer"]): r for r in records}
    lines = [
        "| model (4x64, AdamW, clipping) | step: graphpass / eager / compile (s) | "
        "graphpass / eager | graphpass / compile | peak over the steps: graphpass / eager / "
        "compile (MB) | graphpass / eager | losses vs eager (largest) |",
        "|---|---|---|---|---|---|---|",
    ]
    names = list(dict.fromkeys(r["model"] for r in records))
    for name in names:
        g, e, c = by[name, "graphpass"], by[name, "eager"], by[name, "compile"]
        drift = max(abs(a - b) for a, b in zip(g["losses"], e["losses"], strict=True))
        lines.append(
            f"| {name} | {g['step_s']:.2f} / {e['step_s']:.2f} / {c['step_s']:.2f} | "
            f"{g['step_s'] / e['step_s']:.2f}x | {g['step_s'] / c['step_s']:.2f}x | "
            f"{g['peak_mb']:.0f} / {e['peak_mb']:.0f} / {c['peak_mb']:.0f} | "
            f"{g['peak_mb'] / e['peak_mb']:.2f}x | {drift:.1e} |")
    lines += [
        "",
        "Where the step goes (seconds, medians of the timed steps) and a lower bound for any "
        "trainer that computes the same products and runs the same torch optimizer: the "
        "matrix products of one forward and backward in the faster of the two libraries "
        "(torch's GEMMs by torch's profiler, onnxruntime's `MatMul`/`Gemm` kernels by its "
        "own), plus the clipping and AdamW update as torch eager runs it.",
        "",
        "| model | trainer | forward | backward | clip + AdamW + zero_grad | matrix products "
        "(forward + backward) |",
        "|---|---|---|---|---|---|",
    ]
    for name in names:
        for trainer in TRAINERS:
            r = by[name, trainer]
            products = f"{r['products_s']:.2f}" if "products_s" in r else "-"
            lines.append(f"| {name} | {trainer} | {r['forward_s']:.2f} | {r['backward_s']:.2f} "
                         f"| {r['update_s']:.2f} | {products} |")
    lines += ["", "| model | lower bound (s) | lower bound / eager | goal (0.6x eager) |",
              "|---|---|---|---|"]
    for name in names:
        g, e = by[name, "graphpass"], by[name, "eager"]
        bound = min(g["products_s"], e["products_s"]) + e["update_s"]
        lines.append(f"| {name} | {bound:.2f} | {bound / e['step_s']:.2f}x | "
                     f"{0.6 * e['step_s']:.2f} s |")
    lines.append("")
    lines.append(f"The wrapper's own overhead on a tiny model (16-32-4 MLP, batch 8): "
                 f"{overhead['overhead_ms']:.3f} ms a step "
                 f"({overhead['wrapped'] * 1e3:.3f} ms through `graphpass.torch.Module`, "
                 f"{overhead['direct'] * 1e3:.3f} ms running its two sessions directly).")
    return lines


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
