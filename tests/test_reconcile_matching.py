"""reconcile-initializers: name forms, level-wise matching, ambiguity, user rules."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graphpass.ir import Node
from graphpass.passes._reconcile_match import match_names
from graphpass.passes._reconcile_names import (
    BasePrefix,
    canonical_forms,
    ends_with_leaf,
    strip_wrappers,
)
from graphpass.torch import module_scope


@pytest.mark.parametrize(("key", "expected"), [
    ("module.encoder.weight", "encoder.weight"),
    ("module.module.encoder.weight", "encoder.weight"),
    ("_orig_mod.encoder.weight", "encoder.weight"),
    ("module._orig_mod.encoder.weight", "encoder.weight"),
    ("layers.0._fsdp_wrapped_module.attn.weight", "layers.0.attn.weight"),
    ("_fsdp_wrapped_module.layers.0._checkpoint_wrapped_module.mlp.weight",
     "layers.0.mlp.weight"),
    ("encoder._orig_mod.block.weight", "encoder.block.weight"),
    ("submodule.weight", "submodule.weight"),  # 'module' only as a whole leading component
    ("encoder.module.weight", "encoder.module.weight"),
])
def test_strip_wrappers(key, expected):
    assert strip_wrappers(key) == expected


def test_canonical_forms_ignore_separators_and_export_prefixes():
    same = {"blocks.0.norm.weight", "blocks_0_norm_weight", "blocks::0::norm::weight",
            "blocks/0/norm/weight"}
    assert {min(canonical_forms(name)) for name in same} == {"blocks_0_norm_weight"}
    assert "blocks_0_norm_weight" in canonical_forms("p_blocks_0_norm_weight")
    assert "scale" in canonical_forms("b_scale")
    assert canonical_forms("p_proj.weight") == {"p_proj_weight"}  # dotted: a real module name


def test_leaf_comparison_works_across_separator_styles():
    assert ends_with_leaf("bn_running_mean", "running_mean")
    assert ends_with_leaf("p_blocks_1_norm_weight", "weight")
    assert not ends_with_leaf("p_blocks_1_norm_bias", "weight")


def test_base_prefix_apply():
    add = BasePrefix("add", "transformer")
    strip = BasePrefix("strip", "model")
    assert add.apply("h_0_weight") == "transformer_h_0_weight"
    assert strip.apply("model_h_0_weight") == "h_0_weight"
    assert strip.apply("lm_head_weight") is None
    assert add.apply_to_name("h.0.weight") == "transformer.h.0.weight"
    assert str(strip) == "strip 'model.'"


def _rules(names, keys, **options):
    matching = match_names(names, keys, **options)
    return {m.name: (m.key, m.rule) for m in matching.matches.values()}, matching


def test_levels_in_order_and_exact_wins():
    found, matching = _rules(
        ["a.weight", "b.weight", "c.weight"],
        ["a.weight", "module.b.weight", "c_weight"])
    assert found == {"a.weight": ("a.weight", "exact"),
                     "b.weight": ("module.b.weight", "wrapper-prefix"),
                     "c.weight": ("c_weight", "separator")}
    assert not matching.problems


def test_base_prefix_is_chosen_once_by_count():
    names = ["transformer.h.0.weight", "transformer.h.1.weight", "transformer.wte.weight",
             "lm_head.weight"]
    keys = ["h.0.weight", "h.1.weight", "wte.weight", "lm_head.weight"]
    found, matching = _rules(names, keys)
    assert str(matching.base_prefix) == "add 'transformer.'"
    assert found["transformer.h.0.weight"] == ("h.0.weight", "base-prefix")
    assert found["lm_head.weight"] == ("lm_head.weight", "exact")


def test_base_prefix_strip():
    found, matching = _rules(["h.0.weight", "h.1.weight"], ["bert.h.0.weight", "bert.h.1.weight",
                                                            "cls.weight"])
    assert str(matching.base_prefix) == "strip 'bert.'"
    assert found["h.1.weight"] == ("bert.h.1.weight", "base-prefix")


def test_base_prefix_is_not_applied_key_by_key():
    """One change for the whole checkpoint: keys needing another prefix stay unmatched."""
    names = ["enc.a.weight", "enc.b.weight", "dec.c.weight"]
    keys = ["a.weight", "b.weight", "c.weight"]
    found, matching = _rules(names, keys)
    assert str(matching.base_prefix) == "add 'enc.'"
    assert "dec.c.weight" not in found


def test_base_prefix_tie_applies_nothing():
    found, matching = _rules(["x.w", "y.v"], ["w", "v"])
    assert matching.base_prefix is None
    assert {str(p) for p in matching.base_prefix_ties} == {"add 'x.'", "add 'y.'"}
    assert found == {}


def test_two_keys_for_one_name_is_ambiguous():
    _, matching = _rules(["encoder.weight"], ["module.encoder.weight", "_orig_mod.encoder.weight"])
    assert not matching.matches
    assert len(matching.problems) == 1
    problem = matching.problems[0]
    assert "'encoder.weight' is fitted by several checkpoint keys" in problem
    assert "'module.encoder.weight'" in problem and "'_orig_mod.encoder.weight'" in problem


def test_keys_with_the_same_data_are_not_ambiguous():
    found, matching = _rules(["embed.weight"], ["module.embed.weight", "_orig_mod.embed.weight"],
                             same_data=lambda a, b: True)
    assert found["embed.weight"][0] == "_orig_mod.embed.weight"
    assert matching.aliases == {"module.embed.weight": "_orig_mod.embed.weight"}
    assert not matching.problems


def test_one_key_for_two_names_is_ambiguous():
    _, matching = _rules(["blocks.0_norm.weight", "blocks_0.norm_weight"], ["blocks_0_norm_weight"])
    assert not matching.matches
    assert "fits several names" in matching.problems[0]


def test_exact_match_is_not_disturbed_by_a_looser_one():
    found, matching = _rules(["a.b"], ["a.b", "a_b"])
    assert found == {"a.b": ("a.b", "exact")}
    assert not matching.problems


def test_renames_come_first_and_may_tie_several_names():
    found, matching = _rules(
        ["embed.weight", "head.weight", "norm.weight"],
        ["shared", "norm.weight", "embed.weight"],
        renames={"shared": ["embed.weight", "head.weight"]})
    assert found["embed.weight"] == ("shared", "rename")
    assert found["head.weight"] == ("shared", "rename")
    assert found["norm.weight"] == ("norm.weight", "exact")
    assert not matching.problems


def test_bad_renames_are_problems_with_suggestions():
    _, matching = _rules(["encoder.weight"], ["enc.weight"],
                         renames={"enc.weigth": ["encoder.weight"],
                                  "enc.weight": ["encoder.wieght"]})
    assert any("no key 'enc.weigth'; did you mean 'enc.weight'" in p for p in matching.problems)
    assert any("no initializer or weight input 'encoder.wieght'" in p and
               "did you mean 'encoder.weight'" in p for p in matching.problems)


def test_regex_rules_rewrite_keys_before_matching():
    found, _ = _rules(["encoder.layers.0.weight", "encoder.layers.1.weight", "head.weight"],
                      ["enc.layer_0.weight", "enc.layer_1.weight", "module.head.weight"],
                      rules=[(re.compile(r"^enc\.layer_(\d+)\."), r"encoder.layers.\1.")])
    assert found["encoder.layers.1.weight"] == ("enc.layer_1.weight", "rule")
    assert found["head.weight"] == ("module.head.weight", "wrapper-prefix")


@pytest.mark.parametrize(("name", "metadata", "scope"), [
    ("/transformer/blocks.0/proj/proj.0/MatMul", None, "transformer.blocks.0.proj.0"),
    ("/encoder/layer.3/attention/self/query/MatMul", None, "encoder.layer.3.attention.self.query"),
    ("/MatMul", None, None),
    ("node_linear", "['', 'transformer', 'transformer.blocks.0.norm', 'layer_norm']",
     "transformer.blocks.0.norm"),
    ("node_mul", "['', 'mul']", None),
])
def test_module_scope_from_legacy_names_and_dynamo_metadata(name, metadata, scope):
    node = Node("MatMul", ["a", "b"], ["c"], name=name,
                metadata={"pkg.torch.onnx.name_scopes": metadata} if metadata else None)
    assert module_scope(node) == scope


_COMPONENTS = ["encoder", "layers", "attn", "mlp", "norm", "proj", "0", "1", "12", "q", "k"]
_LEAVES = ["weight", "bias", "running_mean", "inv_scale"]
_CONVENTIONS = {
    "exact": lambda k: k,
    "wrapper-prefix": lambda k: f"module._orig_mod.{k}",
    "separator": lambda k: k.replace(".", "_"),
    "base-prefix": lambda k: k.removeprefix("body."),
}


@settings(max_examples=60, deadline=None)
@given(paths=st.sets(st.tuples(st.lists(st.sampled_from(_COMPONENTS), min_size=1, max_size=4),
                               st.sampled_from(_LEAVES)).map(lambda p: ".".join([*p[0], p[1]])),
                     min_size=1, max_size=30),
       convention=st.sampled_from(sorted(_CONVENTIONS)))
def test_every_convention_recovers_the_names(paths, convention):
    """Random module trees under a base prefix, plus an unprefixed head, in each convention."""
    names = [f"body.{path}" for path in sorted(paths)] + ["head.weight"]
    rename = _CONVENTIONS[convention]
    keys = {rename(name): name for name in names}
    found, matching = _rules(names, list(keys))
    assert not matching.problems
    assert {name: key for name, (key, _) in found.items()} == {v: k for k, v in keys.items()}
    rules = {name: rule for name, (_, rule) in found.items()}
    expected_head = "exact" if convention == "base-prefix" else convention
    assert rules.pop("head.weight") == expected_head
    assert set(rules.values()) == {convention}
