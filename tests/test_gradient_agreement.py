"""lint-gradients agrees with onnxruntime-training 1.19.2.

* Every case of the corpus (ONNX node tests with each float input made the trainable
  weight, and torch exports) against the golden verdicts ORT gave
  (``tests/ort_training/gradient_golden.json``, written by
  ``benchmarks/gradient_agreement.py --write-golden``): fast, no ORT.
* A seeded sample re-checked live with ORT (one batch process), so that the golden
  file cannot silently rot.
* The seed case: a torch ``export_modules_as_functions`` model fails at the function
  call; after ``inline-functions`` the lint is silent and ORT trains it.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from ort_training import gradient_corpus as corpus

import graphpass
from graphpass import PassContext, Severity
from graphpass.framework import default_registry
from graphpass.passes.lint_gradients import LintGradients
from graphpass.training.rules import onnxruntime_training_rules

HERE = Path(__file__).resolve().parent
GOLDEN = json.loads((HERE / "ort_training" / "gradient_golden.json").read_text())["cases"]
CACHE = HERE / ".cache" / "gradient_corpus"
SAMPLE_SEED = 20241130
# cases per verdict kind in the live sample
SAMPLE_QUOTA = {"ok": 14, "missing": 14, "broken": 10, "unreachable": 6, "no-gradient": 4,
                "duplicate": 3, "captured": 2, "other:": 4, "torch": 6}


@pytest.fixture(scope="session")
def cases() -> dict[str, corpus.Case]:
    node_cases, _ = corpus.node_test_cases(cache=CACHE)
    torch_cases, _ = corpus.torch_cases(CACHE)
    return {case.name: case for case in [*node_cases, *torch_cases]}


def test_the_corpus_is_the_one_the_golden_verdicts_were_taken_on(cases):
    assert sorted(cases) == sorted(GOLDEN), (
        "the corpus changed: run `benchmarks/gradient_agreement.py --write-golden`")


def test_the_lint_predicts_every_golden_verdict(cases):
    disagreements = {}
    for name, ort in GOLDEN.items():
        if corpus.kind(ort) == "other":
            continue
        predicted = corpus.lint_verdict(corpus.lint_findings(cases[name]))
        if not corpus.same(ort, predicted):
            disagreements[name] = (ort, predicted)
    assert disagreements == {}
    predictable = [v for v in GOLDEN.values() if corpus.kind(v) != "other"]
    assert len(predictable) > 1900  # the comparison covered the corpus


def _sample() -> list[str]:
    rng = random.Random(SAMPLE_SEED)
    groups: dict[str, list[str]] = {}
    for name, verdict in sorted(GOLDEN.items()):
        if verdict.startswith("crash"):
            continue  # a crash costs a worker restart; the batch mode test covers it
        group = "torch" if name.startswith("torch_") else verdict.split(" ", 1)[0]
        groups.setdefault(group, []).append(name)
    chosen = []
    for group, quota in SAMPLE_QUOTA.items():
        names = groups.get(group, [])
        chosen.extend(rng.sample(names, min(quota, len(names))))
    return chosen


@pytest.mark.ort_training
def test_a_seeded_sample_still_gets_the_golden_verdicts_from_ort(cases, ort_training_python,
                                                                 tmp_path: Path):
    sample = _sample()
    assert len(sample) >= 50
    jobs = corpus.iter_jobs([cases[name] for name in sample], str(tmp_path))
    results = corpus.run_oracle(ort_training_python, jobs, tmp_path, timeout=600)
    rules = onnxruntime_training_rules()
    live = {name: corpus.ort_verdict(results[name], rules) for name in sample}
    assert {n: v for n, v in live.items() if v != GOLDEN[n]} == {}
    for name in sample:
        if corpus.kind(live[name]) != "other":
            predicted = corpus.lint_verdict(corpus.lint_findings(cases[name]))
            assert corpus.same(live[name], predicted), name


@pytest.mark.ort_training
def test_batch_mode_survives_a_runtime_abort(cases, ort_training_python, tmp_path: Path):
    crashing = next(name for name, verdict in sorted(GOLDEN.items())
                    if verdict.startswith("crash"))
    picked = [crashing, "test_relu[x]", "test_sum_example[data_0]"]
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(job) + "\n" for job in
                            corpus.iter_jobs([cases[n] for n in picked], str(tmp_path))))
    run = subprocess.run([ort_training_python, str(corpus.ORACLE), "--batch", str(jobs)],
                         check=True, capture_output=True, text=True, timeout=600)
    results = [json.loads(line) for line in run.stdout.splitlines()]
    assert [r["id"] for r in results] == picked
    assert results[0]["crashed"] and "Assertion" in results[0]["error"]
    assert results[1]["ok"] and results[2]["missing_gradient_op"] == "Sum"


# --------------------------------------------------------------------------- seed case
@pytest.fixture(scope="module")
def blocks_case() -> corpus.Case:
    (case,), _ = corpus.torch_cases(CACHE, ["torch_blocks[functions]"])
    return case


def test_the_function_export_fails_at_the_call_with_an_inline_hint(blocks_case):
    model = graphpass.Model.from_proto(blocks_case.model)
    assert model.functions  # export_modules_as_functions made Block a local function
    findings = LintGradients({"trainable": blocks_case.trainable,
                              "loss": blocks_case.loss}).run(
        model, PassContext(registry=default_registry())).findings
    calls = [f for f in findings if f.code == "GP410"]
    assert [f.data["op_type"] for f in calls] == ["Block", "Block"]
    assert all(f.severity is Severity.ERROR for f in calls)
    assert all("inline-functions" in (f.hint or "") for f in calls)
    assert corpus.lint_verdict(findings) == GOLDEN["torch_blocks[functions]"] == "missing Block"


@pytest.mark.ort_training
def test_after_inline_functions_the_lint_is_silent_and_ort_trains(blocks_case,
                                                                  ort_training_python,
                                                                  tmp_path: Path):
    options = {"lint-gradients": {"trainable": blocks_case.trainable,
                                  "loss": blocks_case.loss}}
    result = graphpass.PassManager(["inline-functions", "lint-gradients"],
                                   options=options).run(
        graphpass.Model.from_proto(blocks_case.model))
    assert not result.model.functions
    assert [f for f in result.findings if f.pass_name == "lint-gradients"] == []
    path = tmp_path / "inlined.onnx"
    graphpass.save(result.model, path)
    proto = onnx.load(path)
    data = {i.name: np.random.default_rng(0).standard_normal(
        [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
        for i in proto.graph.input}
    np.savez(tmp_path / "feeds.npz", **data)
    verdict = corpus.ask_oracle(ort_training_python, path, "--requires-grad",
                                ",".join(blocks_case.trainable), "--train-steps", "4",
                                "--inputs", str(tmp_path / "feeds.npz"), timeout=300)
    assert verdict["ok"], verdict["error"]
    losses = verdict["losses"]
    assert len(losses) == 4 and losses[-1] < losses[0]  # it trains: the loss falls


def test_by_default_exporter_constants_are_not_trained_and_named_when_asked_for():
    (case,), _ = corpus.torch_cases(CACHE, ["torch_rmsnorm[dynamo]"])
    model = graphpass.Model.from_proto(case.model)
    default = LintGradients({"loss": case.loss}).run(
        model, PassContext(registry=default_registry())).findings
    # torch's record is there: the default trainable set is exactly its parameters.
    [left_out] = [f for f in default if f.code == "GP423"]
    assert not [f for f in default if f.severity.value == "error"]
    everything = LintGradients({"loss": case.loss, "trainable": ["*"]}).run(
        model, PassContext(registry=default_registry())).findings
    constants = [f for f in everything if f.code == "GP404"]
    assert constants and all("an exporter constant" in f.message for f in constants)
    assert {f.value for f in constants} <= set(left_out.data["left_out"])
    chosen = LintGradients({"loss": case.loss, "trainable": case.trainable}).run(
        model, PassContext(registry=default_registry())).findings
    assert chosen == []
