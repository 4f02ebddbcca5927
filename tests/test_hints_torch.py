"""Hints are true for the exporter and the case at hand, on real torch 2.13 exports.

Each test exports one small module the way a user would (the legacy exporter, the dynamo
exporter with and without its optimizer, a model saved without its weights), reads the
finding's hint, and where the hint says what to do, does it: the finding must then go
away. A hint that sends the user to an option that changes nothing fails here. A hint
found false for its case is kept as a strict xfail whose reason says what is wrong (it
passes, and so fails the run, once the hint or the finding is fixed).

Exports are made once per module (a fixture of module scope), each only when a test
asks for it.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import graphpass  # noqa: E402
import graphpass.torch as gp_torch  # noqa: E402
from graphpass.errors import PassError  # noqa: E402
from graphpass.findings import Finding  # noqa: E402

pytestmark = pytest.mark.torch


class Normed(torch.nn.Module):
    """Two LayerNorms of one size (fresh: equal weights, which exporters merge) and a
    non-persistent buffer (which ``state_dict()`` does not hold)."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = torch.nn.Linear(4, 8)
        self.ln1 = torch.nn.LayerNorm(8)
        self.ln2 = torch.nn.LayerNorm(8)
        self.register_buffer("scale", torch.linspace(0.5, 2.0, 8), persistent=False)
        self.out = torch.nn.Linear(8, 2)

    def forward(self, x: Any) -> Any:
        return self.out(self.ln2(torch.relu(self.ln1(self.inp(x))) * self.scale))


def _export(module: Any, kind: str, path: Path) -> None:
    x = torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "legacy":
            torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["x"])
        elif kind == "legacy-no-folding":
            torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["x"],
                              do_constant_folding=False)
        elif kind == "legacy-training":
            torch.onnx.export(module, (x,), str(path), dynamo=False, input_names=["x"],
                              training=torch.onnx.TrainingMode.TRAINING)
        elif kind == "dynamo":
            torch.onnx.export(module, (x,), dynamo=True, verbose=False).save(str(path))
        elif kind == "dynamo-no-optimize":
            torch.onnx.export(module, (x,), dynamo=True, optimize=False,
                              verbose=False).save(str(path))
        elif kind == "dynamo-no-initializers":
            torch.onnx.export(module, (x,), dynamo=True, verbose=False).save(
                str(path), include_initializers=False)
        else:
            raise AssertionError(kind)


@pytest.fixture(scope="module")
def module() -> Any:
    torch.manual_seed(0)
    return Normed().eval()


@pytest.fixture(scope="module")
def export(module: Any, tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The export of ``module`` of a kind, made on first use."""
    folder = tmp_path_factory.mktemp("hints")
    made: dict[str, Path] = {}

    def get(kind: str) -> Path:
        if kind not in made:
            _export(module, kind, folder / f"{kind}.onnx")
            made[kind] = folder / f"{kind}.onnx"
        return made[kind]

    return get


@pytest.fixture(scope="module")
def state_dict_checkpoint(module: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``state_dict()`` as safetensors: what users save (no non-persistent buffers)."""
    from safetensors.torch import save_file

    path = tmp_path_factory.mktemp("checkpoint") / "model.safetensors"
    save_file({k: v.contiguous() for k, v in module.state_dict().items()}, str(path))
    return path


def _run(path: Path, passes: list[str], **kwargs: Any) -> list[Finding]:
    return graphpass.PassManager(passes, **kwargs).run(graphpass.load(path)).findings


def _only(findings: list[Finding], code: str) -> Iterator[Finding]:
    found = [f for f in findings if f.code == code]
    assert found, f"no {code} in {[f.code for f in findings]}"
    return iter(found)


# ===================================================================== GP205
def test_gp205_on_a_legacy_export_names_what_keeps_weights_apart(export, state_dict_checkpoint):
    for kind in ("legacy", "legacy-no-folding"):  # folding or not, the legacy exporter merges
        findings = _run(export(kind), ["reconcile-initializers"],
                        checkpoints=[state_dict_checkpoint])
        for finding in _only(findings, "GP205"):
            hint = finding.hint or ""
            assert "TrainingMode.TRAINING" in hint and "whatever do_constant_folding" in hint
            assert "optimizer" not in finding.message  # the legacy exporter has none
    # The advice, followed: an export in training mode keeps every LayerNorm's weights.
    findings = _run(export("legacy-training"), ["reconcile-initializers"],
                    checkpoints=[state_dict_checkpoint])
    assert "GP205" not in {f.code for f in findings}


def test_gp205_on_a_dynamo_export_names_optimize_false(export, state_dict_checkpoint):
    findings = _run(export("dynamo"), ["reconcile-initializers"],
                    checkpoints=[state_dict_checkpoint])
    for finding in _only(findings, "GP205"):
        assert "optimize=False" in (finding.hint or "")
        assert "TrainingMode" not in (finding.hint or "")
    findings = _run(export("dynamo-no-optimize"), ["reconcile-initializers"],
                    checkpoints=[state_dict_checkpoint])
    assert "GP205" not in {f.code for f in findings}


# ===================================================================== GP201
def test_gp201_for_a_non_persistent_buffer_offers_no_rename(export, module,
                                                            state_dict_checkpoint, tmp_path):
    findings = _run(export("dynamo-no-optimize"), ["reconcile-initializers"],
                    checkpoints=[state_dict_checkpoint])
    (finding,) = _only(findings, "GP201")
    assert finding.value == "scale"
    assert "non-persistent buffer" in finding.message
    assert "rename" not in (finding.hint or "") and "save_state" in (finding.hint or "")
    # The advice, followed: a checkpoint written by save_state fills it.
    full = gp_torch.save_state(module, tmp_path / "full.safetensors")
    findings = _run(export("dynamo-no-optimize"), ["reconcile-initializers"],
                    checkpoints=[full])
    assert "GP201" not in {f.code for f in findings}


def test_gp201_for_a_parameter_still_offers_a_rename(export, state_dict_checkpoint, tmp_path):
    from safetensors.torch import load_file, save_file

    state = load_file(str(state_dict_checkpoint))
    state["head_offset"] = state.pop("out.bias")
    renamed = tmp_path / "renamed.safetensors"
    save_file(state, str(renamed))
    findings = _run(export("dynamo-no-optimize"), ["reconcile-initializers"],
                    checkpoints=[renamed])
    (finding,) = (f for f in findings if f.code == "GP201" and f.value == "out.bias")
    assert "rename" in (finding.hint or "")


# ===================================================================== GP403
def test_gp403_on_layer_normalization_points_to_fix_training_ops(export):
    for kind in ("dynamo", "legacy"):
        findings = _run(export(kind), ["lint-gradients"])
        found = [f for f in findings
                 if f.code == "GP403" and f.data.get("rule_op") == "LayerNormalization"]
        assert len(found) == 2, [f.message for f in findings]
        for finding in found:
            assert "fix-training-ops" in (finding.hint or "")
            assert "train-ready" in (finding.hint or "")
        # The advice, followed: fix-training-ops before the lint leaves no GP403.
        findings = _run(export(kind), ["fix-training-ops", "lint-gradients"])
        assert "GP403" not in {f.code for f in findings}, [f.message for f in findings]


# ===================================================================== GP426
def test_gp426_says_weights_were_not_saved_not_fused(export, state_dict_checkpoint):
    findings = _run(export("dynamo-no-initializers"), ["lint-gradients"])
    (finding,) = _only(findings, "GP426")
    where = finding.data["where"]
    assert "not saved" in where["inp.weight"] and "fused" not in where["inp.weight"]
    assert "fused" not in finding.message.split(" and ")[0]
    assert "include_initializers=False" in (finding.hint or "")
    assert "--checkpoint" in (finding.hint or "")
    # The advice, followed: train-ready with the checkpoint leaves no GP426.
    findings = _run(export("dynamo-no-initializers"), ["train-ready"],
                    checkpoints=[state_dict_checkpoint])
    assert "GP426" not in {f.code for f in findings}, [f.message for f in findings]


# ============================================== check: a weight the file lacks
def test_check_names_an_undefined_weight_in_its_own_words(export, cli):
    code, stdout, _ = cli("lint", export("dynamo-no-initializers"))
    assert code == 1
    text = " ".join(stdout.split())
    assert "topologically sorted" not in text
    assert "'inp.weight'" in text and "nothing defines" in text
    assert "detect-missing-buffers" in text
    findings = _run(export("dynamo-no-initializers"), ["check"])
    (finding,) = _only(findings, "GP501")
    assert "inp.weight" in finding.data["undefined"] and "scale" in finding.data["undefined"]
    # The advice, followed: detect-missing-buffers names what each of them is.
    findings = _run(export("dynamo-no-initializers"), ["detect-missing-buffers"])
    named = {f.value for f in findings if f.code.startswith("GP3")}
    assert set(finding.data["undefined"]) <= named


def test_gp201_for_a_buffer_saved_without_its_weights(export, module, state_dict_checkpoint,
                                                      tmp_path):
    """Saved with include_initializers=False, only the signature says ``scale`` is a buffer."""
    findings = _run(export("dynamo-no-initializers"), ["reconcile-initializers"],
                    checkpoints=[state_dict_checkpoint])
    (finding,) = (f for f in findings if f.code == "GP201" and f.value == "scale")
    assert "buffer" in finding.message and "save_state" in (finding.hint or "")
    full = gp_torch.save_state(module, tmp_path / "full.safetensors")
    findings = _run(export("dynamo-no-initializers"), ["reconcile-initializers"],
                    checkpoints=[full])
    assert "GP201" not in {f.code for f in findings}, [f.message for f in findings]


# ====================================================== every hint seen here
_PASS_IN_HINT = re.compile(r"(?:-p |run |`)([a-z][a-z0-9]*(?:-[a-z0-9]+)+)\b")
_FLAG_IN_HINT = re.compile(r"(?<![\w-])(--[a-z][a-z-]+)")


def test_every_hint_names_passes_and_options_that_exist(export, state_dict_checkpoint):
    """Across the exports and the pipelines above, no hint names a pass or a flag that
    does not exist (a renamed pass or option left behind in a hint)."""
    from graphpass.cli import _parser
    from graphpass.framework import default_registry

    registry = default_registry()
    names = set(registry.passes) | set(registry.pipelines)
    parser = _parser()
    flags = {option for action in parser._actions for option in action.option_strings}
    for sub in parser._subparsers._group_actions[0].choices.values():  # type: ignore[union-attr]
        flags |= {option for action in sub._actions for option in action.option_strings}
    seen: set[str] = set()
    named: set[str] = set()
    for kind in ("legacy", "dynamo", "dynamo-no-optimize", "dynamo-no-initializers"):
        for passes, checkpoints in ((["train-ready"], [state_dict_checkpoint]),
                                    (["train-ready"], []),
                                    (["detect-missing-buffers", "check"], []),
                                    (["lint-gradients"], [])):
            for finding in _run(export(kind), passes, checkpoints=checkpoints):
                if not finding.hint:
                    continue
                seen.add(finding.code)
                for name in _PASS_IN_HINT.findall(finding.hint):
                    if name.startswith(("onnxruntime", "state-dict")):
                        continue
                    assert name in names, (finding.code, name, finding.hint)
                    named.add(name)
                for flag in _FLAG_IN_HINT.findall(finding.hint):
                    assert flag in flags, (finding.code, flag, finding.hint)
    assert {"GP201", "GP205", "GP301", "GP403", "GP426"} <= seen, seen
    assert {"fix-training-ops", "train-ready"} <= named, named


# ================================================= more modules, more findings
class IntOutput(torch.nn.Module):
    """A Linear whose result leaves the graph as int32: no loss is differentiable."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.a(x).to(torch.int32)


class Branching(torch.nn.Module):
    """A Linear read inside ``torch.cond`` (an If with the weights in its subgraph), or,
    with ``resolved``, the same branch taken in Python (no control flow in the export)."""

    def __init__(self, resolved: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.resolved = resolved

    def forward(self, x: Any) -> Any:
        if self.resolved:
            return self.a(x)
        return torch.cond(x.sum() > 0, self.a, lambda y: y * 2.0, (x,))


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """``exported(name, make, kind, **export_kwargs)``: the export of ``make()``, made once."""
    folder = tmp_path_factory.mktemp("more-hints")
    made: dict[str, Path] = {}

    def get(name: str, make: Callable[[], Any], kind: str, **kwargs: Any) -> Path:
        if name not in made:
            torch.manual_seed(0)
            path = folder / f"{name}.onnx"
            x = torch.randn(3, 4)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if kind == "dynamo":
                    torch.onnx.export(make().eval(), (x,), dynamo=True, verbose=False,
                                      **kwargs).save(str(path))
                else:
                    torch.onnx.export(make().eval(), (x,), str(path), dynamo=False,
                                      input_names=["x"], **kwargs)
            made[name] = path
        return made[name]

    return get


def _codes(findings: list[Finding]) -> set[str]:
    return {f.code for f in findings}


# ===================================================================== GP402
@pytest.mark.parametrize("kind", ["dynamo", "legacy"])
def test_gp402_freezing_what_reaches_no_loss_clears_it(exported, kind):
    path = exported(f"int-output-{kind}", IntOutput, kind)
    findings = _run(path, ["lint-gradients"])
    found = list(_only(findings, "GP402"))
    assert {f.value for f in found} == {"a.weight", "a.bias"}
    for finding in found:
        assert "no loss output is differentiable" in finding.message
        assert "`frozen` option" in (finding.hint or "")
    # The advice, followed: freezing them leaves nothing unreachable.
    findings = _run(path, ["lint-gradients"], options={"lint-gradients": {"frozen": ["a.*"]}})
    assert "GP402" not in _codes(findings), [f.message for f in findings]


# ============================================================= GP406, GP401
def test_gp406_and_gp401_on_torch_cond_clear_when_frozen_or_resolved(exported):
    path = exported("cond", Branching, "dynamo")
    findings = _run(path, ["lint-gradients"])
    captured = list(_only(findings, "GP406"))
    assert {f.value for f in captured} == {"a.weight", "a.bias"}
    for finding in captured:
        assert "freeze it" in (finding.hint or "") and "control flow" in (finding.hint or "")
    (missing,) = (f for f in findings if f.code == "GP401")
    assert "If" in missing.message and "`frozen`" in (missing.hint or "")
    # Followed one way: freezing the weights takes the If off the trainable path.
    findings = _run(path, ["lint-gradients"], options={"lint-gradients": {"frozen": ["a.*"]}})
    assert not _codes(findings) & {"GP401", "GP406"}, [f.message for f in findings]
    # Followed the other way: the branch resolved at export time, no control flow.
    findings = _run(exported("cond-resolved", lambda: Branching(resolved=True), "dynamo"),
                    ["lint-gradients"])
    assert not _codes(findings) & {"GP401", "GP406"}, [f.message for f in findings]
    assert not [f for f in findings if f.severity.name == "ERROR"], \
        [f.message for f in findings]


# ===================================================================== GP421
def test_gp421_a_misspelt_trainable_pattern_is_fixed_by_its_spelling(exported):
    path = exported("int-output-dynamo", IntOutput, "dynamo")
    findings = _run(path, ["lint-gradients"],
                    options={"lint-gradients": {"trainable": ["a.wieght"]}})
    (finding,) = _only(findings, "GP421")
    assert finding.value == "a.wieght" or "a.wieght" in finding.message
    assert "spelling" in (finding.hint or "") and "fnmatch" in (finding.hint or "")
    for spelled in (["a.weight"], ["a.w*ght"]):  # spelled right, or a fnmatch pattern
        findings = _run(path, ["lint-gradients"],
                        options={"lint-gradients": {"trainable": spelled}})
        assert "GP421" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP410
def test_gp410_on_modules_exported_as_functions_clears_after_inline_functions(exported):
    path = exported("layer-norm-functions", Normed, "legacy",
                    export_modules_as_functions={torch.nn.LayerNorm})
    findings = _run(path, ["lint-gradients"])
    found = list(_only(findings, "GP410"))
    assert len(found) == 2
    for finding in found:
        assert "inline-functions" in (finding.hint or "")
    # The advice, followed: inline-functions before the lint.
    findings = _run(path, ["inline-functions", "lint-gradients"])
    assert "GP410" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP203
def test_gp203_two_equal_prefixes_are_settled_by_the_rule_the_hint_shows(export, module,
                                                                         tmp_path):
    from safetensors.torch import save_file

    state = module.state_dict()
    doubled = {f"{prefix}.{key}": value.detach().clone().contiguous()
               for prefix in ("a", "b") for key, value in state.items()}
    checkpoint = tmp_path / "two-prefixes.safetensors"
    save_file(doubled, str(checkpoint))
    findings = _run(export("legacy"), ["reconcile-initializers"], checkpoints=[checkpoint])
    (finding,) = _only(findings, "GP203")
    assert "rules = {" in (finding.hint or "")
    assert "GP201" in _codes(findings)  # nothing was filled
    # The advice, followed: a rule of the hint's form, for one of the two prefixes.
    findings = _run(export("legacy"), ["reconcile-initializers"],
                    options={"reconcile-initializers": {"rules": {"^a\\.": ""}}},
                    checkpoints=[checkpoint])
    assert not _codes(findings) & {"GP201", "GP203"}, [f.message for f in findings]


# ===================================================================== GP208
def test_gp208_a_weight_input_under_another_key_is_filled_by_a_rename(exported, module,
                                                                      tmp_path):
    from safetensors.torch import save_file

    path = exported("no-params", Normed, "legacy", export_params=False)
    state = {k: v.detach().clone().contiguous() for k, v in module.state_dict().items()}
    state["head_offset"] = state.pop("out.bias")
    checkpoint = tmp_path / "renamed.safetensors"
    save_file(state, str(checkpoint))
    findings = _run(path, ["reconcile-initializers"], checkpoints=[checkpoint])
    (finding,) = _only(findings, "GP208")
    assert finding.data["inputs"] == ["out.bias"]
    assert "renames" in (finding.hint or "")
    # The advice, followed: a rename (checkpoint key = initializer).
    findings = _run(path, ["reconcile-initializers"],
                    options={"reconcile-initializers": {"renames": {"head_offset": "out.bias"}}},
                    checkpoints=[checkpoint])
    assert "GP208" not in _codes(findings), [f.message for f in findings]


class Squared(torch.nn.Module):
    """``x + w * w``: one Mul reads the parameter at both of its inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: Any) -> Any:
        return x + self.w * self.w


class DoubleOutput(torch.nn.Module):
    """A Linear whose result leaves the graph as float64."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.a(x).double()


class Linear3d(torch.nn.Module):
    """A Linear on a 3-d input: exported as MatMul with the weight transposed (folded)."""

    def __init__(self, out: int = 3) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, out)

    def forward(self, x: Any) -> Any:
        return self.a(x.unsqueeze(0))


class ConvNorm(torch.nn.Module):
    """Conv1d then BatchNorm1d (with statistics of its own): the optimizer fuses them."""

    def __init__(self) -> None:
        super().__init__()
        self.c = torch.nn.Conv1d(4, 4, 1)
        self.bn = torch.nn.BatchNorm1d(4)
        with torch.no_grad():
            self.bn.running_mean.uniform_()
            self.bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x: Any) -> Any:
        return self.bn(self.c(x.unsqueeze(-1)))


class Tied(torch.nn.Module):
    """Two Linears that share one weight (or, ``tied=False``, have one each)."""

    def __init__(self, tied: bool = True) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4, bias=False)
        self.b = torch.nn.Linear(4, 4, bias=False)
        if tied:
            self.b.weight = self.a.weight

    def forward(self, x: Any) -> Any:
        return self.b(torch.relu(self.a(x)))


def _save(state: dict[str, Any], path: Path) -> Path:
    from safetensors.torch import save_file

    save_file({k: v.detach().clone().contiguous() for k, v in state.items()}, str(path))
    return path


# ===================================================================== GP405
@pytest.mark.parametrize("kind", ["dynamo", "legacy"])
def test_gp405_an_identity_on_one_use_clears_it(exported, kind, tmp_path):
    import onnx

    options = {"optimize": False} if kind == "dynamo" else {"do_constant_folding": False}
    path = exported(f"squared-{kind}", Squared, kind, **options)
    findings = _run(path, ["lint-gradients"])
    (finding,) = _only(findings, "GP405")
    assert finding.value == "w" and "Identity" in (finding.hint or "")
    # The advice, followed: one of the two uses goes through an Identity node.
    model = onnx.load(str(path))
    (mul,) = (n for n in model.graph.node if n.op_type == "Mul" and list(n.input) == ["w", "w"])
    mul.input[1] = "w_again"
    model.graph.node.insert(0, onnx.helper.make_node("Identity", ["w"], ["w_again"]))
    onnx.save(model, str(tmp_path / "identity.onnx"))
    findings = _run(tmp_path / "identity.onnx", ["lint-gradients"])
    assert "GP405" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP407
@pytest.mark.parametrize("kind", ["dynamo", "legacy"])
def test_gp407_a_cast_to_float_before_the_output_clears_it(exported, kind, tmp_path):
    import onnx

    path = exported(f"double-{kind}", DoubleOutput, kind)
    findings = _run(path, ["lint-gradients"])
    (finding,) = _only(findings, "GP407")
    assert "DOUBLE" in finding.message and "Cast to=FLOAT" in (finding.hint or "")
    # The advice, followed: a Cast to FLOAT before the loss leaves the graph.
    model = onnx.load(str(path))
    output = model.graph.output[0]
    model.graph.node.append(onnx.helper.make_node("Cast", [output.name], ["loss"],
                                                  to=onnx.TensorProto.FLOAT))
    output.name = "loss"
    output.type.tensor_type.elem_type = onnx.TensorProto.FLOAT
    onnx.save(model, str(tmp_path / "cast.onnx"))
    findings = _run(tmp_path / "cast.onnx", ["lint-gradients"])
    assert "GP407" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP303
def test_gp303_filling_from_the_checkpoint_the_hint_names_clears_it(exported, module, cli,
                                                                    tmp_path):
    path = exported("no-params", Normed, "legacy", export_params=False)
    checkpoint = _save(module.state_dict(), tmp_path / "model.safetensors")
    findings = _run(path, ["detect-missing-buffers"], checkpoints=[checkpoint])
    found = list(_only(findings, "GP303"))
    assert {f.value for f in found} >= {"inp.weight", "out.bias"}
    for finding in found:
        assert f"--checkpoint {checkpoint}" in (finding.hint or "")
        assert "reconcile-initializers" in (finding.hint or "")
    # The advice, followed: reconcile-initializers from that checkpoint, on the command line.
    code, _, stderr = cli("run", path, "-o", tmp_path / "filled.onnx", "-p",
                          "reconcile-initializers", "--checkpoint", checkpoint)
    assert code == 0, stderr
    findings = _run(tmp_path / "filled.onnx", ["detect-missing-buffers"])
    assert "GP303" not in _codes(findings), [f.message for f in findings]


def test_gp303_the_command_the_hint_shows_runs_as_written(exported, module, cli, tmp_path):
    path = exported("no-params", Normed, "legacy", export_params=False)
    checkpoint = _save(module.state_dict(), tmp_path / "model.safetensors")
    findings = _run(path, ["detect-missing-buffers"], checkpoints=[checkpoint])
    hint = next(_only(findings, "GP303")).hint or ""
    command = re.search(r"\(graphpass (run MODEL -o OUT [^)]*)\)", hint)
    assert command is not None, hint
    args = command.group(1).replace("MODEL", str(path)).replace(
        "OUT", str(tmp_path / "filled.onnx")).split()
    code, _, stderr = cli(*args)
    assert code == 0, stderr
    findings = _run(tmp_path / "filled.onnx", ["detect-missing-buffers"])
    assert "GP303" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP252
def test_gp252_each_way_out_the_hint_names_clears_it(exported, tmp_path):
    path = exported("linear3d-legacy", Linear3d, "legacy")
    findings = _run(path, ["restore-parameters"])
    (finding,) = _only(findings, "GP252")
    hint = finding.hint or ""
    assert "do_constant_folding=False" in hint and "optimize=False" in hint
    assert "reconcile-initializers" in hint
    for name, kind, options in (("linear3d-legacy-no-folding", "legacy",
                                 {"do_constant_folding": False}),
                                ("linear3d-dynamo-no-optimize", "dynamo", {"optimize": False})):
        findings = _run(exported(name, Linear3d, kind, **options),
                        ["restore-parameters", "lint-gradients"])
        assert not _codes(findings) & {"GP251", "GP252", "GP426"}, \
            (name, [f.message for f in findings])
    torch.manual_seed(0)
    checkpoint = _save(Linear3d().state_dict(), tmp_path / "linear3d.safetensors")
    findings = _run(path, ["reconcile-initializers", "restore-parameters", "lint-gradients"],
                    checkpoints=[checkpoint])
    assert not _codes(findings) & {"GP251", "GP252", "GP426"}, [f.message for f in findings]


# ===================================================================== GP251
def test_gp251_on_a_fused_batch_norm_clears_without_the_optimizer(exported, tmp_path):
    path = exported("conv-norm-dynamo", ConvNorm, "dynamo")
    findings = _run(path, ["restore-parameters"])
    (finding,) = _only(findings, "GP251")
    assert "optimize=False" in (finding.hint or "")
    assert "rename" not in (finding.hint or "")  # no checkpoint was given: nothing to rename
    findings = _run(exported("conv-norm-dynamo-no-optimize", ConvNorm, "dynamo",
                             optimize=False), ["restore-parameters", "lint-gradients"])
    assert not _codes(findings) & {"GP251", "GP426"}, [f.message for f in findings]
    torch.manual_seed(0)
    checkpoint = _save(ConvNorm().state_dict(), tmp_path / "conv-norm.safetensors")
    findings = _run(path, ["reconcile-initializers", "restore-parameters", "lint-gradients"],
                    checkpoints=[checkpoint])
    assert not _codes(findings) & {"GP251", "GP426"}, [f.message for f in findings]


# ===================================================================== GP215
def test_gp215_the_untied_model_exported_takes_both_values(exported, tmp_path):
    torch.manual_seed(0)
    state = dict(Tied().state_dict())
    state["b.weight"] = state["a.weight"] + 1.0
    checkpoint = _save(state, tmp_path / "untied.safetensors")
    findings = _run(exported("tied-dynamo", Tied, "dynamo"), ["reconcile-initializers"],
                    checkpoints=[checkpoint])
    (finding,) = _only(findings, "GP215")
    assert "export that model" in (finding.hint or "")
    # The advice, followed: the model untied, exported, has an initializer for each.
    findings = _run(exported("untied-dynamo", lambda: Tied(tied=False), "dynamo"),
                    ["reconcile-initializers"], checkpoints=[checkpoint])
    assert not _codes(findings) & {"GP201", "GP215"}, [f.message for f in findings]


def test_gp252_on_a_square_weight_a_checkpoint_fills_the_copy(exported, tmp_path):
    path = exported("linear3d-square-legacy", lambda: Linear3d(out=4), "legacy")
    findings = _run(path, ["restore-parameters"])
    assert "reconcile-initializers computes the copies" in (next(_only(findings, "GP252")).hint
                                                            or "")
    import numpy as np

    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    reference = Linear3d(out=4).eval()  # other values than the export's (a trained model's)
    checkpoint = _save(reference.state_dict(), tmp_path / "square.safetensors")
    result = graphpass.PassManager(
        ["reconcile-initializers", "restore-parameters", "lint-gradients"],
        checkpoints=[checkpoint]).run(graphpass.load(path))
    assert not _codes(result.findings) & {"GP251", "GP252", "GP426"}, \
        [f.message for f in result.findings]
    # The copy is the weight transposed (x @ W.T), not the weight: the model computes torch's.
    graphpass.save(result.model, tmp_path / "filled.onnx")
    session = ort.InferenceSession(str(tmp_path / "filled.onnx"))
    x = torch.randn(3, 4)
    (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    np.testing.assert_allclose(got, reference(x).detach().numpy(), atol=1e-5)


# ===================================================================== GP425
class Bounded(torch.nn.Module):
    """``where(x > 0, x, b)`` with a trainable [4] ``b`` broadcast to [3, 4] (or, with
    ``expanded``, expanded to the output's shape first)."""

    def __init__(self, expanded: bool = False) -> None:
        super().__init__()
        self.b = torch.nn.Parameter(torch.randn(4))
        self.expanded = expanded

    def forward(self, x: Any) -> Any:
        return torch.where(x > 0, x, self.b.expand_as(x) if self.expanded else self.b)


class VectorTimesStack(torch.nn.Module):
    """A trainable vector times a stack of two matrices (or, with ``as_matrix``, the
    vector unsqueezed to [1, n] and the result squeezed)."""

    def __init__(self, as_matrix: bool = False) -> None:
        super().__init__()
        self.v = torch.nn.Parameter(torch.randn(4))
        self.as_matrix = as_matrix

    def forward(self, x: Any) -> Any:
        stack = x.unsqueeze(0).expand(2, 3, 4).transpose(1, 2)
        if self.as_matrix:
            return (self.v.unsqueeze(0) @ stack).squeeze(-2)
        return self.v @ stack


class HalfOfSplit(torch.nn.Module):
    """A Linear's output split in two, one half used (or, with ``sliced``, sliced out)."""

    def __init__(self, sliced: bool = False) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.sliced = sliced

    def forward(self, x: Any) -> Any:
        y = self.a(x)
        return y[:, :2] if self.sliced else y.split(2, dim=1)[0]


_GP425_CASES = {  # the module, the export kinds that show it, what the hint says to do
    "where": (Bounded, ("dynamo", "legacy"), "Expand it to the output's shape",
              lambda: Bounded(expanded=True)),
    "matmul": (VectorTimesStack, ("dynamo",), "Unsqueeze to [1, n] before",
               lambda: VectorTimesStack(as_matrix=True)),
    "split": (HalfOfSplit, ("dynamo", "legacy"), "Slice out the parts you need",
              lambda: HalfOfSplit(sliced=True)),
}


@pytest.mark.parametrize("case", sorted(_GP425_CASES))
def test_gp425_each_rewrite_the_hint_names_clears_it(exported, case):
    make, kinds, advice, rewritten = _GP425_CASES[case]
    for kind in kinds:
        path = exported(f"gp425-{case}-{kind}", make, kind)
        findings = _run(path, ["lint-gradients"])
        (finding,) = _only(findings, "GP425")
        assert advice in (finding.hint or ""), finding.hint
        # The advice, followed: the model rewritten as the hint says, exported the same way
        # (dynamo without its optimizer, which would fold the rewrite into a constant).
        options = {"optimize": False} if kind == "dynamo" else {}
        findings = _run(exported(f"gp425-{case}-{kind}-rewritten", rewritten, kind, **options),
                        ["lint-gradients"])
        assert not [f for f in findings if f.severity.name == "ERROR"], \
            (kind, [f.message for f in findings])


def test_gp425_on_where_clears_when_the_input_is_frozen(exported):
    path = exported("gp425-where-dynamo", Bounded, "dynamo")
    assert "freeze that input" in (next(_only(_run(path, ["lint-gradients"]), "GP425")).hint
                                   or "")
    findings = _run(path, ["lint-gradients"], options={"lint-gradients": {"frozen": ["b"]}})
    assert "GP425" not in _codes(findings), [f.message for f in findings]


class TwoHeads(torch.nn.Module):
    """Two Linears, each with an output of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 2)
        self.b = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.a(x), self.b(x)


# ===================================================================== GP110
def test_gp110_a_misspelt_function_is_inlined_once_spelled_right(exported):
    path = exported("layer-norm-functions", Normed, "legacy",
                    export_modules_as_functions={torch.nn.LayerNorm})
    name = "torch.nn.modules.normalization::LayerNorm"
    findings = _run(path, ["inline-functions"],
                    options={"inline-functions": {"only": [name.replace("Norm", "Nrom")]}})
    (finding,) = _only(findings, "GP110")
    assert "'domain::name'" in (finding.hint or "")
    assert "GP101" not in _codes(findings)
    # The advice, followed: the name spelled as 'domain::name'.
    findings = _run(path, ["inline-functions"], options={"inline-functions": {"only": [name]}})
    assert "GP110" not in _codes(findings) and "GP101" in _codes(findings)


# ===================================================================== GP852
def test_gp852_on_weights_not_saved_is_cleared_by_reconcile_initializers(export, module,
                                                                         tmp_path):
    path = export("dynamo-no-initializers")
    findings = _run(path, ["build-training-graph"],
                    options={"build-training-graph": {"directory": str(tmp_path / "a")}})
    (finding,) = _only(findings, "GP852")
    assert "reconcile-initializers" in (finding.hint or "")
    # The advice, followed: fill the weights from a checkpoint first.
    full = gp_torch.save_state(module, tmp_path / "full.safetensors")
    findings = _run(path, ["reconcile-initializers", "build-training-graph"],
                    options={"build-training-graph": {"directory": str(tmp_path / "b")}},
                    checkpoints=[full])
    assert "GP852" not in _codes(findings) and "GP850" in _codes(findings), \
        [f.message for f in findings]


# ============================================================= GP853, GP854
def test_gp853_weights_off_the_loss_are_cleared_by_freezing_them(exported, tmp_path):
    path = exported("two-heads", TwoHeads, "dynamo")
    options = {"directory": str(tmp_path / "a"), "loss_inputs": ["linear"]}
    findings = _run(path, ["build-training-graph"], options={"build-training-graph": options})
    (finding,) = _only(findings, "GP853")
    assert finding.data["weights"] == ["b.weight", "b.bias"]
    assert "freeze them" in (finding.hint or "")
    options = {**options, "directory": str(tmp_path / "b"), "frozen": ["b.*"]}
    findings = _run(path, ["build-training-graph"], options={"build-training-graph": options})
    assert "GP853" not in _codes(findings) and "GP850" in _codes(findings), \
        [f.message for f in findings]


def test_gp854_a_misspelt_trainable_pattern_is_fixed_by_its_spelling(exported, tmp_path):
    path = exported("two-heads", TwoHeads, "dynamo")
    options = {"directory": str(tmp_path / "a"), "trainable": ["a.wieght"]}
    findings = _run(path, ["build-training-graph"], options={"build-training-graph": options})
    (finding,) = _only(findings, "GP854")
    assert "spelling" in (finding.hint or "")
    options = {"directory": str(tmp_path / "b"), "trainable": ["a.weight"]}
    findings = _run(path, ["build-training-graph"], options={"build-training-graph": options})
    assert "GP854" not in _codes(findings) and "GP850" in _codes(findings), \
        [f.message for f in findings]


class Picked(torch.nn.Module):
    """A Linear's columns picked by an int64 buffer (an INT64 initializer of the legacy export)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.register_buffer("idx", torch.tensor([0, 2]))

    def forward(self, x: Any) -> Any:
        return self.a(x).index_select(1, self.idx)


class Block(torch.nn.Module):
    """A LayerNorm inside a module of its own: two levels of functions when both are
    exported as functions."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(4)

    def forward(self, x: Any) -> Any:
        return self.ln(x) * 2.0


class Nested(torch.nn.Module):
    """A Block, then a Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x: Any) -> Any:
        return self.out(self.block(x))


# ===================================================================== GP422
def test_gp422_an_int_buffer_named_trainable_is_left_out_as_the_hint_says(exported):
    path = exported("picked-legacy", Picked, "legacy")
    findings = _run(path, ["lint-gradients"],
                    options={"lint-gradients": {"trainable": ["idx", "a.*"]}})
    (finding,) = _only(findings, "GP422")
    assert finding.value == "idx" or "'idx'" in finding.message
    assert "only float, float16, double and bfloat16" in (finding.hint or "")
    # The advice, followed: only float weights named.
    findings = _run(path, ["lint-gradients"], options={"lint-gradients": {"trainable": ["a.*"]}})
    assert "GP422" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP124
def test_gp124_either_way_out_the_hint_names_inlines_the_nested_functions(exported):
    path = exported("nested-functions", Nested, "legacy",
                    export_modules_as_functions={Block, torch.nn.LayerNorm})
    with pytest.raises(PassError) as raised:
        _run(path, ["inline-functions"], options={"inline-functions": {"max_depth": 1}})
    assert "GP124" in str(raised.value)
    hint = raised.value.hint or ""
    assert "raise 'max-depth'" in hint and "exclude the innermost functions" in hint
    # Followed one way: a max-depth as deep as the calls nest.
    findings = _run(path, ["inline-functions"], options={"inline-functions": {"max_depth": 2}})
    assert "GP101" in _codes(findings)
    # Followed the other way: the innermost function excluded.
    findings = _run(path, ["inline-functions"], options={"inline-functions": {
        "max_depth": 1, "exclude": ["torch.nn.modules.normalization::LayerNorm"]}})
    assert "GP101" in _codes(findings), [f.message for f in findings]


class ConvThenNorm(torch.nn.Module):
    """Conv1d then BatchNorm1d over ``length`` positions: 3 x ``length`` values a channel."""

    def __init__(self, length: int = 1) -> None:
        super().__init__()
        self.c = torch.nn.Conv1d(4, 4, 1)
        self.bn = torch.nn.BatchNorm1d(4)
        self.length = length

    def forward(self, x: Any) -> Any:
        return self.bn(self.c(x.unsqueeze(-1).repeat(1, 1, self.length)))


class Squashed(torch.nn.Module):
    """A Linear, then a Sigmoid module (a function named Sigmoid when exported as one)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.act = torch.nn.Sigmoid()

    def forward(self, x: Any) -> Any:
        return self.act(self.a(x))


# ===================================================================== GP424
def test_gp424_larger_inputs_or_frozen_weights_before_it_clear_it(exported):
    path = exported("conv-then-norm", ConvThenNorm, "dynamo", optimize=False)
    findings = _run(path, ["lint-gradients"])
    (finding,) = _only(findings, "GP424")
    assert finding.data["values_per_channel"] == 3
    hint = finding.hint or ""
    assert "more than 8 values a channel" in hint and "freeze the weights before it" in hint
    # Followed one way: more values a channel (3 x 32).
    findings = _run(exported("conv-then-norm-32", lambda: ConvThenNorm(32), "dynamo",
                             optimize=False), ["lint-gradients"])
    assert "GP424" not in _codes(findings), [f.message for f in findings]
    # Freezing everything, the BatchNorm's own scale and shift too, clears it as well.
    findings = _run(path, ["lint-gradients"],
                    options={"lint-gradients": {"frozen": ["c.*", "bn.*"]}})
    assert "GP424" not in _codes(findings), [f.message for f in findings]


def test_gp424_clears_when_the_weights_before_it_are_frozen(exported):
    path = exported("conv-then-norm", ConvThenNorm, "dynamo", optimize=False)
    assert "freeze the weights before it" in (next(_only(_run(path, ["lint-gradients"]),
                                                         "GP424")).hint or "")
    findings = _run(path, ["lint-gradients"], options={"lint-gradients": {"frozen": ["c.*"]}})
    assert "GP424" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP420
def test_gp420_a_function_named_like_an_operator_clears_once_inlined(exported):
    path = exported("sigmoid-function", Squashed, "legacy",
                    export_modules_as_functions={torch.nn.Sigmoid})
    findings = _run(path, ["lint-gradients"])
    (finding,) = _only(findings, "GP420")
    assert "inline the functions first" in (finding.hint or "")
    findings = _run(path, ["inline-functions", "lint-gradients"])
    assert not _codes(findings) & {"GP410", "GP420"}, [f.message for f in findings]


# ===================================================================== GP211
def test_gp211_a_fused_batch_norm_missing_a_key_clears_each_way_the_hint_names(exported,
                                                                            tmp_path):
    torch.manual_seed(0)
    state = dict(ConvNorm().state_dict())
    state.pop("bn.running_var")
    partial = _save(state, tmp_path / "partial.safetensors")
    torch.manual_seed(0)
    state["bn.var"] = ConvNorm().state_dict()["bn.running_var"]
    renamed = _save(state, tmp_path / "renamed.safetensors")
    path = exported("conv-norm-dynamo", ConvNorm, "dynamo")
    findings = _run(path, ["reconcile-initializers"], checkpoints=[partial])
    (finding,) = _only(findings, "GP211")
    assert "'bn.running_var'" in finding.message
    hint = finding.hint or ""
    assert "optimize=False" in hint and "rename" in hint
    # Followed one way: the key the checkpoint has under another name, renamed.
    findings = _run(path, ["reconcile-initializers"], checkpoints=[renamed],
                    options={"reconcile-initializers": {"renames": {"bn.var": "bn.running_var"}}})
    assert "GP211" not in _codes(findings) and "GP212" in _codes(findings), \
        [f.message for f in findings]
    # Followed the other way: exported without the optimizer, nothing is fused.
    findings = _run(exported("conv-norm-dynamo-no-optimize", ConvNorm, "dynamo",
                             optimize=False), ["reconcile-initializers"], checkpoints=[partial])
    assert "GP211" not in _codes(findings), [f.message for f in findings]


def test_gp201_on_a_legacy_fused_conv_weight_its_rename_keeps_the_model_right(exported,
                                                                           tmp_path):
    """The legacy export's conv weight with the batch norm fused in is no checkpoint tensor:
    a checkpoint lacking ``bn.running_var`` gets GP211 naming that key (as the dynamo export
    does), never GP201's "add a rename" (which filled the slot with the raw conv weight, and
    the model silently stopped computing the batch norm). The hint's rename of the key the
    checkpoint holds under another name separates the two again, and the model stays right."""
    import numpy as np

    ort = pytest.importorskip("onnxruntime")
    torch.manual_seed(0)
    torch.randn(3, 4)  # as ``exported`` draws its input before it builds the module
    reference = ConvNorm().eval()
    state = dict(reference.state_dict())
    variance = state.pop("bn.running_var")
    partial = _save(state, tmp_path / "partial.safetensors")
    renamed = _save({**state, "bn.var": variance}, tmp_path / "renamed.safetensors")
    path = exported("conv-norm-legacy", ConvNorm, "legacy")
    findings = _run(path, ["reconcile-initializers"], checkpoints=[partial])
    assert not [f for f in findings if f.code == "GP201"], [f.message for f in findings]
    (finding,) = _only(findings, "GP211")
    assert finding.value.startswith("onnx::Conv") and "'bn.running_var'" in finding.message
    assert finding.data["missing"] == ["bn.running_var"]
    hint = finding.hint or ""
    assert "do_constant_folding=False" in hint and "checkpoint key = 'bn.running_var'" in hint
    # The rename GP201 offered before, onto the fused slots, is refused: nothing is written.
    weight, bias = finding.value, finding.data["bias"]
    with pytest.raises(PassError, match="not a checkpoint tensor"):
        graphpass.PassManager(["reconcile-initializers"], checkpoints=[partial], options={
            "reconcile-initializers": {"renames": {"c.weight": weight, "c.bias": bias}}},
        ).run(graphpass.load(path))
    # The advice, followed: the key the checkpoint holds under another name, renamed.
    result = graphpass.PassManager(["reconcile-initializers"], checkpoints=[renamed], options={
        "reconcile-initializers": {"renames": {"bn.var": "bn.running_var"}}},
    ).run(graphpass.load(path))
    assert "GP211" not in _codes(result.findings) and "GP212" in _codes(result.findings), \
        [f.message for f in result.findings]
    assert not [f for f in result.findings if f.severity.name == "ERROR"]
    graphpass.save(result.model, tmp_path / "filled.onnx")
    x = torch.randn(3, 4)
    for model in (path, tmp_path / "filled.onnx"):  # the export itself is right
        session = ort.InferenceSession(str(model))
        (got,) = session.run(None, {session.get_inputs()[0].name: x.numpy()})
        np.testing.assert_allclose(got, reference(x).detach().numpy(), atol=1e-5,
                                   err_msg=str(model))
    # Followed the other way: exported without constant folding, nothing is fused.
    findings = _run(exported("conv-norm-legacy-no-folding", ConvNorm, "legacy",
                             do_constant_folding=False), ["reconcile-initializers"],
                    checkpoints=[partial])
    assert "GP211" not in _codes(findings), [f.message for f in findings]


def test_gp201_on_a_legacy_folded_slot_no_tensor_explains_offers_no_rename(exported, tmp_path):
    """Without the conv weight the fusion was computed from, the fused slot and its bias are
    still constants the exporter computed: no rename can fill them, and the hint says so."""
    torch.manual_seed(0)
    torch.randn(3, 4)
    state = dict(ConvNorm().eval().state_dict())
    state.pop("c.weight")
    checkpoint = _save(state, tmp_path / "no-conv-weight.safetensors")
    path = exported("conv-norm-legacy", ConvNorm, "legacy")
    findings = _run(path, ["reconcile-initializers"], checkpoints=[checkpoint])
    found = [f for f in findings if f.code == "GP201"]
    assert len(found) == 2 and all(f.value.startswith("onnx::Conv") for f in found), \
        [f.message for f in findings]
    for finding in found:
        hint = finding.hint or ""
        assert "add a rename" not in hint and "no rename can fill it" in hint, hint
        assert "do_constant_folding=False" in hint and "constant folding" in finding.message


class Scaled(torch.nn.Module):
    """A Linear times a plain tensor attribute (a tensor constant of torch's export)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.t = torch.linspace(0.5, 2.0, 4)

    def forward(self, x: Any) -> Any:
        return self.a(x) * self.t


# ============================================================ GP201, constant
def test_gp201_for_a_tensor_constant_is_filled_from_save_state(exported, tmp_path):
    import numpy as np

    path = exported("scaled", Scaled, "dynamo")
    torch.manual_seed(1)
    changed = Scaled()
    changed.t = torch.linspace(-1.0, 1.0, 4)
    findings = _run(path, ["reconcile-initializers"],
                    checkpoints=[_save(changed.state_dict(), tmp_path / "state.safetensors")])
    (finding,) = (f for f in findings if f.code == "GP201" and f.value == "t")
    assert "tensor constant" in finding.message
    assert "rename" not in (finding.hint or "") and "save_state" in (finding.hint or "")
    # The advice, followed: a checkpoint written by save_state holds it, and fills it.
    full = gp_torch.save_state(changed, tmp_path / "full.safetensors")
    result = graphpass.PassManager(["reconcile-initializers"], checkpoints=[full]).run(
        graphpass.load(path))
    assert "GP201" not in _codes(result.findings), [f.message for f in result.findings]
    np.testing.assert_array_equal(result.model.graph.initializers["t"].numpy(),
                                  changed.t.numpy())


# ============================================================= GP426, folded
def test_gp426_for_a_folded_parameter_clears_each_way_its_hint_names(exported, tmp_path):
    path = exported("squared-dynamo-optimized", Squared, "dynamo")
    findings = _run(path, ["lint-gradients"])
    (finding,) = _only(findings, "GP426")
    assert finding.data["parameters"] == ["w"] and "folded" in finding.data["where"]["w"]
    hint = finding.hint or ""
    assert "reconcile-initializers" in hint and "optimize=False" in hint
    assert "frozen option" in hint and "include_initializers" not in hint
    # Followed: from a checkpoint, reconcile-initializers computes the copy again.
    torch.manual_seed(0)
    torch.randn(3, 4)  # as ``exported`` draws its input before it builds the module
    checkpoint = _save(Squared().state_dict(), tmp_path / "squared.safetensors")
    findings = _run(path, ["reconcile-initializers", "lint-gradients"],
                    checkpoints=[checkpoint])
    assert "GP426" not in _codes(findings), [f.message for f in findings]
    # Followed: exported without the optimizer.
    findings = _run(exported("squared-dynamo", Squared, "dynamo", optimize=False),
                    ["lint-gradients"])
    assert "GP426" not in _codes(findings), [f.message for f in findings]
    # Followed: named in the frozen option.
    findings = _run(path, ["lint-gradients"], options={"lint-gradients": {"frozen": ["w"]}})
    assert "GP426" not in _codes(findings), [f.message for f in findings]


class Lifted(torch.nn.Module):
    """A Linear times a tensor made inside ``forward()`` (a lifted constant of torch.export)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(4, 4)

    def forward(self, x: Any) -> Any:
        return self.a(x) * torch.tensor([0.5, 1.0, 1.5, 2.0])


@pytest.fixture(scope="module")
def lifted(tmp_path_factory: pytest.TempPathFactory) -> Callable[[bool], tuple[Any, Path]]:
    """``lifted(optimize)``: the ONNXProgram of ``Lifted`` and its file saved without weights."""
    folder = tmp_path_factory.mktemp("lifted")
    made: dict[bool, tuple[Any, Path]] = {}

    def get(optimize: bool) -> tuple[Any, Path]:
        if optimize not in made:
            torch.manual_seed(0)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                program = torch.onnx.export(Lifted().eval(), (torch.randn(3, 4),), dynamo=True,
                                            optimize=optimize, verbose=False)
                path = folder / f"lifted-{optimize}.onnx"
                program.save(str(path), include_initializers=False)
            made[optimize] = (program, path)
        return made[optimize]

    return get


# ==================================================== GP301, lifted constant
def test_gp301_for_a_lifted_constant_is_filled_from_the_programs_save_state(lifted, tmp_path):
    program, path = lifted(False)
    findings = _run(path, ["detect-missing-buffers"])
    (finding,) = (f for f in findings if f.code == "GP301" and "lifted constant" in f.message)
    assert "save_state(onnx_program" in (finding.hint or "")
    # The advice, followed: the export's own tensors saved, and the model filled from them.
    state = gp_torch.save_state(program, tmp_path / "export.safetensors")
    findings = _run(path, ["reconcile-initializers", "detect-missing-buffers"],
                    checkpoints=[state])
    assert "GP301" not in _codes(findings), [f.message for f in findings]


def test_gp301_for_a_folded_constant_is_filled_from_the_programs_save_state(lifted, tmp_path):
    """The dynamo optimizer's folded constant, saved without initializers, is in no
    ``state_dict()`` checkpoint, but the ONNXProgram's own tensors hold it: the hint names
    ``save_state(onnx_program)`` (not "no checkpoint has it"), and following it fills it."""
    from safetensors import safe_open

    program, path = lifted(True)
    findings = _run(path, ["detect-missing-buffers"])
    (finding,) = (f for f in findings if f.code == "GP301" and "folded constant" in f.message)
    hint = finding.hint or ""
    assert "save_state(onnx_program" in hint and "no checkpoint has it" not in hint
    # The advice, followed: the export's own tensors saved (they hold it), and filled from.
    state = gp_torch.save_state(program, tmp_path / "export.safetensors")
    with safe_open(str(state), "pt") as opened:
        assert finding.value in list(opened.keys())
    findings = _run(path, ["reconcile-initializers", "detect-missing-buffers"],
                    checkpoints=[state])
    assert "GP301" not in _codes(findings), [f.message for f in findings]


# ===================================================================== GP851
def test_gp851_on_torch_cond_clears_when_frozen_or_resolved(exported, tmp_path):
    path = exported("cond", Branching, "dynamo")
    findings = _run(path, ["build-training-graph"],
                    options={"build-training-graph": {"directory": str(tmp_path / "a")}})
    (finding,) = _only(findings, "GP851")
    assert "freeze it" in (finding.hint or "") and "control flow" in (finding.hint or "")
    # Followed one way: the weights read in the subgraph frozen (then nothing is left to
    # train in this model, which the build says instead).
    findings = _run(path, ["build-training-graph"], options={"build-training-graph": {
        "directory": str(tmp_path / "b"), "frozen": ["a.*"]}})
    assert "GP851" not in _codes(findings), [f.message for f in findings]
    # Followed the other way: the branch resolved at export time.
    findings = _run(exported("cond-resolved", lambda: Branching(resolved=True), "dynamo"),
                    ["build-training-graph"],
                    options={"build-training-graph": {"directory": str(tmp_path / "c")}})
    assert "GP851" not in _codes(findings) and "GP850" in _codes(findings), \
        [f.message for f in findings]


class Signed(torch.nn.Module):
    """``x`` or ``-x`` by the sign of a trainable ``w``: a comparison, so no gradient reaches
    ``w`` (nor, with ``scaled``, is it the only weight: a Linear before it trains)."""

    def __init__(self, scaled: bool = False) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4))
        self.a = torch.nn.Linear(4, 4) if scaled else None

    def forward(self, x: Any) -> Any:
        y = self.a(x) if self.a is not None else x
        return torch.where(self.w > 0, y, -y)


# ===================================================================== GP852
def test_gp852_when_no_gradient_reaches_any_weight_nothing_is_written(exported, cli, tmp_path):
    path = exported("signed", Signed, "dynamo", optimize=False)  # (the optimizer folds w > 0)
    findings = _run(path, ["build-training-graph"],
                    options={"build-training-graph": {"directory": str(tmp_path / "a")}})
    (finding,) = _only(findings, "GP852")
    assert "'w'" in finding.message and finding.data["weights"] == ["w"]
    assert not _codes(findings) & {"GP850", "GP853"}, [f.message for f in findings]
    assert not (tmp_path / "a").exists()
    code, stdout, _ = cli("run", path, "-o", tmp_path / "ready.onnx", "-p", "train-ready",
                          "--emit-training-graph", tmp_path / "b")
    assert code == 1 and "GP852" in stdout and not (tmp_path / "b").exists()
    # The advice, followed: a weight the loss depends on trains; w stays frozen (GP853).
    findings = _run(exported("signed-scaled", lambda: Signed(scaled=True), "dynamo",
                             optimize=False), ["build-training-graph"],
                    options={"build-training-graph": {"directory": str(tmp_path / "c")}})
    assert {"GP850", "GP853"} <= _codes(findings) and "GP852" not in _codes(findings), \
        [f.message for f in findings]
    assert (tmp_path / "c" / "gradient.onnx").exists()
