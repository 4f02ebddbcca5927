"""The example plugin's own tests, written with graphpass.testing's fixtures."""

from graphpass_example_plugin.passes import OpCounts


def test_the_plugin_gives_its_passes_and_preset(graphpass_registry):
    assert graphpass_registry.plugin_of("passes", "prefix-node-names") == "example"
    assert graphpass_registry.plugin_of("passes", "example-op-counts") == "example"
    assert graphpass_registry.plugin_of("pipelines", "example-tidy") == "example"


def test_prefix_node_names_keeps_what_the_model_computes(graphpass_runner, graphpass_models):
    result = graphpass_runner.assert_preserves_semantics(
        "prefix-node-names", graphpass_models.mlp((4, 8, 3)),
        options={"prefix-node-names": {"prefix": "t_"}})
    assert result.changed
    assert all(node.name.startswith("t_") for node in result.model.graph)


def test_op_counts_counts_each_operator(graphpass_runner, graphpass_models):
    result = graphpass_runner.run("example-op-counts",
                                  graphpass_models.chain("Relu", "Neg", "Relu"))
    (counts,) = result.findings
    assert counts.code == "GP901" and dict(counts.data) == {"Relu": 2, "Neg": 1}


def test_op_counts_warns_above_max_nodes(graphpass_runner, graphpass_models):
    result = graphpass_runner.run(OpCounts(max_nodes=1), graphpass_models.chain("Relu", "Neg"))
    assert [f.code for f in result.findings] == ["GP901", "GP902"]
