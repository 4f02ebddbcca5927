"""The ecosystem passes as discovered from the versions below (generated).

Written by ``python -m graphpass.plugins.ecosystem``; do not edit.
"""

from typing import Any

VERSIONS: dict[str, str | None] = {'onnx_ir': '1.1.0', 'onnxscript': '0.7.2'}

PASSES: list[dict[str, Any]] = [{'kind': 'onnx_ir',
  'name': 'onnx-ir-add-default-attributes',
  'class_name': 'OnnxIRAddDefaultAttributes',
  'ir_pass_name': 'AddDefaultAttributesPass',
  'description': 'Add default values for optional attributes that are not present in '
                 'nodes.',
  'doc': 'Add default values for optional attributes that are not present in nodes.\n'
         '\n'
         '    This pass iterates through all nodes in the model and for each node:\n'
         '    1. Gets the ONNX schema for the operator\n'
         '    2. For each optional attribute with a default value in the schema\n'
         '    3. If the attribute is not present in the node, adds it with the default '
         'value\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.default_attributes.AddDefaultAttributesPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRAddDefaultAttributesOptions',
              'doc': 'Options of OnnxIRAddDefaultAttributes.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-add-initializers-to-inputs',
  'class_name': 'OnnxIRAddInitializersToInputs',
  'ir_pass_name': 'AddInitializersToInputsPass',
  'description': 'Add initializers to inputs.',
  'doc': 'Add initializers to inputs.\n'
         '\n'
         '    This pass finds all initializers and adds them to the graph.inputs list if '
         'they are not already present.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.constant_manipulation.AddInitializersToInputsPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRAddInitializersToInputsOptions',
              'doc': 'Options of OnnxIRAddInitializersToInputs.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-checker',
  'class_name': 'OnnxIRChecker',
  'ir_pass_name': 'CheckerPass',
  'description': 'Run onnx checker on the model.',
  'doc': 'Run onnx checker on the model.\n'
         '\n'
         "This is onnx_ir's ``onnx_ir.passes.common.onnx_checker.CheckerPass``.",
  'analysis': True,
  'options': {'class': 'OnnxIRCheckerOptions',
              'doc': 'Options of OnnxIRChecker.\n'
                     '\n'
                     'Attributes:\n'
                     '    full_check: See the library.\n'
                     '    skip_opset_compatibility_check: See the library.\n'
                     '    check_custom_domain: See the library.',
              'fields': [{'name': 'full_check', 'type': 'bool', 'default': False},
                         {'name': 'skip_opset_compatibility_check',
                          'type': 'bool',
                          'default': False},
                         {'name': 'check_custom_domain',
                          'type': 'bool',
                          'default': False}]}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-clear-metadata-and-doc-string',
  'class_name': 'OnnxIRClearMetadataAndDocString',
  'ir_pass_name': 'ClearMetadataAndDocStringPass',
  'description': 'Clear all metadata and docstring from the model, graphs, nodes, and '
                 'functions.',
  'doc': 'Clear all metadata and docstring from the model, graphs, nodes, and '
         'functions.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.clear_metadata_and_docstring.ClearMetadataAndDocStringPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRClearMetadataAndDocStringOptions',
              'doc': 'Options of OnnxIRClearMetadataAndDocString.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-common-subexpression-elimination',
  'class_name': 'OnnxIRCommonSubexpressionElimination',
  'ir_pass_name': 'CommonSubexpressionEliminationPass',
  'description': 'Eliminate common subexpression in ONNX graphs.',
  'doc': 'Eliminate common subexpression in ONNX graphs.\n'
         '\n'
         '    .. versionadded:: 0.1.1\n'
         '\n'
         '    .. versionchanged:: 0.1.3\n'
         "        Constant nodes with values smaller than ``size_limit`` will be CSE'd.\n"
         '\n'
         '    Attributes:\n'
         '        size_limit: The maximum size of the tensor to be csed. If the tensor '
         'contains\n'
         "            number of elements larger than size_limit, it will not be cse'd. "
         'Default is 10.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.common_subexpression_elimination.CommonSubexpressionEliminationPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRCommonSubexpressionEliminationOptions',
              'doc': 'Options of OnnxIRCommonSubexpressionElimination.\n'
                     '\n'
                     'Attributes:\n'
                     '    size_limit: The maximum size of the tensor to be csed. If the '
                     'tensor contains number of elements larger than size_limit, it will '
                     "not be cse'd. Default is 10.",
              'fields': [{'name': 'size_limit', 'type': 'int', 'default': 10}]}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-deduplicate-hashed-initializers',
  'class_name': 'OnnxIRDeduplicateHashedInitializers',
  'ir_pass_name': 'DeduplicateHashedInitializersPass',
  'description': 'Remove duplicated initializer tensors (using a hashed method) from the '
                 'graph.',
  'doc': 'Remove duplicated initializer tensors (using a hashed method) from the graph.\n'
         '\n'
         '    This pass detects initializers with identical shape, dtype, and hashed '
         'content,\n'
         '    and replaces all duplicate references with a canonical one.\n'
         '\n'
         '    This pass should have a lower peak memory usage than '
         ':class:`DeduplicateInitializersPass`\n'
         '    as it does not store the full tensor data in memory, but instead uses a '
         'hash of the tensor data.\n'
         '\n'
         '    .. versionadded:: 0.1.7\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.initializer_deduplication.DeduplicateHashedInitializersPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRDeduplicateHashedInitializersOptions',
              'doc': 'Options of OnnxIRDeduplicateHashedInitializers.\n'
                     '\n'
                     'Attributes:\n'
                     '    size_limit: See the library.',
              'fields': [{'name': 'size_limit', 'type': 'int', 'default': 4294967296}]}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-deduplicate-initializers',
  'class_name': 'OnnxIRDeduplicateInitializers',
  'ir_pass_name': 'DeduplicateInitializersPass',
  'description': 'Remove duplicated initializer tensors from the main graph and all '
                 'subgraphs.',
  'doc': 'Remove duplicated initializer tensors from the main graph and all subgraphs.\n'
         '\n'
         '    This pass detects initializers with identical shape, dtype, and content,\n'
         '    and replaces all duplicate references with a canonical one.\n'
         '\n'
         '    Initializers are deduplicated within each graph. To deduplicate '
         'initializers\n'
         '    in the model globally (across graphs), use '
         ':class:`~onnx_ir.passes.common.LiftSubgraphInitializersToMainGraphPass`\n'
         '    to lift the initializers to the main graph first before running pass.\n'
         '\n'
         '    .. versionadded:: 0.1.3\n'
         '    .. versionchanged:: 0.1.7\n'
         '        This pass now deduplicates initializers in subgraphs as well.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.initializer_deduplication.DeduplicateInitializersPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRDeduplicateInitializersOptions',
              'doc': 'Options of OnnxIRDeduplicateInitializers.\n'
                     '\n'
                     'Attributes:\n'
                     '    size_limit: See the library.',
              'fields': [{'name': 'size_limit', 'type': 'int', 'default': 1024}]}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-identity-elimination',
  'class_name': 'OnnxIRIdentityElimination',
  'ir_pass_name': 'IdentityEliminationPass',
  'description': 'Pass for eliminating redundant Identity nodes.',
  'doc': 'Pass for eliminating redundant Identity nodes.\n'
         '\n'
         '    This pass removes Identity nodes according to the following rules:\n'
         '\n'
         '    1. For any node of the form `y = Identity(x)`, where `y` is not an output\n'
         '       of any graph, replace all uses of `y` with a use of `x`, and remove the '
         'node.\n'
         '    2. If `y` is an output of a graph, and `x` is not an input of any graph,\n'
         '       we can still do the elimination, but the value `x` should be renamed to '
         'be `y`.\n'
         '    3. If `y` is a graph-output and `x` is a graph-input, we cannot eliminate\n'
         '       the node. It should be retained.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.identity_elimination.IdentityEliminationPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRIdentityEliminationOptions',
              'doc': 'Options of OnnxIRIdentityElimination.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-inline',
  'class_name': 'OnnxIRInline',
  'ir_pass_name': 'InlinePass',
  'description': 'Inline model local functions to the main graph and functions and '
                 'remove unused functions.',
  'doc': 'Inline model local functions to the main graph and functions and remove unused '
         'functions.\n'
         '\n'
         '    When a node calls a function defined in the model and when ``criteria`` is '
         'None or\n'
         '    ``criteria(function)`` returns True, the function body is inlined into the '
         'graph in place\n'
         '    of the call node.\n'
         '\n'
         '    .. versionadded:: 0.1.16\n'
         '        The ``criteria`` parameter.\n'
         '\n'
         '    Requires:\n'
         '        No cyclic dependencies between functions in the model.\n'
         '\n'
         '    Attributes:\n'
         '        criteria: Optional function that takes an :class:`onnx_ir.Function` '
         'and\n'
         '            returns True if the it should be inlined. If None, all function '
         'calls are inlined.\n'
         '\n'
         "This is onnx_ir's ``onnx_ir.passes.common.inliner.InlinePass``. Not available "
         'as options (a pipeline file cannot write their values): ``criteria``.',
  'analysis': False,
  'options': {'class': 'OnnxIRInlineOptions',
              'doc': 'Options of OnnxIRInline.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-lift-constants-to-initializers',
  'class_name': 'OnnxIRLiftConstantsToInitializers',
  'ir_pass_name': 'LiftConstantsToInitializersPass',
  'description': 'Lift constants to initializers.',
  'doc': 'Lift constants to initializers.\n'
         '\n'
         '    Attributes:\n'
         '        lift_all_constants: Whether to lift all Constant nodes, including '
         'those that does not contain a tensor attribute (e.g. with value_ints etc.)\n'
         '            Default to False, where only Constants with the ``value`` '
         'attribute are lifted.\n'
         '        size_limit: The minimum size of the tensor to be lifted. If the tensor '
         'contains\n'
         '            number of elements less than size_limit, it will not be lifted. '
         'Default is 16.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.constant_manipulation.LiftConstantsToInitializersPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRLiftConstantsToInitializersOptions',
              'doc': 'Options of OnnxIRLiftConstantsToInitializers.\n'
                     '\n'
                     'Attributes:\n'
                     '    lift_all_constants: Whether to lift all Constant nodes, '
                     'including those that does not contain a tensor attribute (e.g. '
                     'with value_ints etc.) Default to False, where only Constants with '
                     'the ``value`` attribute are lifted.\n'
                     '    size_limit: The minimum size of the tensor to be lifted. If '
                     'the tensor contains number of elements less than size_limit, it '
                     'will not be lifted. Default is 16.',
              'fields': [{'name': 'lift_all_constants', 'type': 'bool', 'default': False},
                         {'name': 'size_limit', 'type': 'int', 'default': 16}]}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-lift-subgraph-initializers-to-main-graph',
  'class_name': 'OnnxIRLiftSubgraphInitializersToMainGraph',
  'ir_pass_name': 'LiftSubgraphInitializersToMainGraphPass',
  'description': 'Lift subgraph initializers to main graph.',
  'doc': 'Lift subgraph initializers to main graph.\n'
         '\n'
         '    This pass lifts the initializers of a subgraph to the main graph.\n'
         '    It is used to ensure that the initializers are available in the main '
         'graph\n'
         '    for further processing or optimization.\n'
         '\n'
         '    Initializers that are also graph inputs will not be lifted.\n'
         '\n'
         '    .. versionchanged:: 0.2.1\n'
         '        Lifted initializers will be renamed if necessary to avoid name\n'
         '        collisions with existing initializers, node outputs, or graph inputs '
         'in\n'
         '        the main graph.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.constant_manipulation.LiftSubgraphInitializersToMainGraphPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRLiftSubgraphInitializersToMainGraphOptions',
              'doc': 'Options of OnnxIRLiftSubgraphInitializersToMainGraph.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-name-fix',
  'class_name': 'OnnxIRNameFix',
  'ir_pass_name': 'NameFixPass',
  'description': 'Pass for fixing names to ensure all values and nodes have unique '
                 'names.',
  'doc': 'Pass for fixing names to ensure all values and nodes have unique names.\n'
         '\n'
         '    This pass ensures that:\n'
         '    1. Graph inputs and outputs have unique names (take precedence)\n'
         '    2. All intermediate values have unique names (assign names to unnamed '
         'values)\n'
         '    3. All values in subgraphs have unique names within their graph and parent '
         'graphs\n'
         '    4. All nodes have unique names within their graph\n'
         '\n'
         '    The pass maintains global uniqueness across the entire model.\n'
         '\n'
         '    You can customize the name generation functions for nodes and values by '
         'passing\n'
         '    a subclass of :class:`NameGenerator`.\n'
         '\n'
         '    For example, you can use a custom naming scheme like this::\n'
         '\n'
         '        class CustomNameGenerator:\n'
         '            def custom_node_name(node: ir.Node) -> str:\n'
         '                return f"custom_node_{node.op_type}"\n'
         '\n'
         '            def custom_value_name(value: ir.Value) -> str:\n'
         '                return f"custom_value_{value.type}"\n'
         '\n'
         '        name_fix_pass = NameFixPass(name_generator=CustomNameGenerator())\n'
         '\n'
         '    .. versionadded:: 0.1.6\n'
         '\n'
         "This is onnx_ir's ``onnx_ir.passes.common.naming.NameFixPass``. Not available "
         'as options (a pipeline file cannot write their values): ``name_generator``.',
  'analysis': False,
  'options': {'class': 'OnnxIRNameFixOptions',
              'doc': 'Options of OnnxIRNameFix.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-output-fix',
  'class_name': 'OnnxIROutputFix',
  'ir_pass_name': 'OutputFixPass',
  'description': 'Pass for adding Identity nodes to fix invalid output configurations.',
  'doc': 'Pass for adding Identity nodes to fix invalid output configurations.\n'
         '\n'
         '    This pass adds Identity nodes according to the following rules:\n'
         '\n'
         '    - If a graph input is directly used as a graph output (without any '
         'intermediate nodes),\n'
         '      insert an Identity node between them. The ONNX specification does not '
         'allow a graph\n'
         '      input to be directly used as a graph output without any processing nodes '
         'in between.\n'
         '    - If a value is used multiple times as graph outputs, insert Identity '
         'nodes for each\n'
         '      duplicate usage (keeping the first usage unchanged). This ensures each '
         'output value\n'
         '      is unique, as required by the ONNX specification.\n'
         '\n'
         '    This pass processes both the main graph and all subgraphs (e.g., in '
         'control flow operators).\n'
         '\n'
         '    Example transformations:\n'
         '        Direct input-to-output:\n'
         '            Before: input -> (direct connection) -> output\n'
         '            After:  input -> Identity -> output\n'
         '\n'
         '        Duplicate outputs:\n'
         '            Before: value -> [output1, output2]\n'
         '            After:  value -> output1, value -> Identity -> output2\n'
         '\n'
         '    .. versionadded:: 0.1.13\n'
         '\n'
         "This is onnx_ir's ``onnx_ir.passes.common.output_fix.OutputFixPass``.",
  'analysis': False,
  'options': {'class': 'OnnxIROutputFixOptions',
              'doc': 'Options of OnnxIROutputFix.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-remove-initializers-from-inputs',
  'class_name': 'OnnxIRRemoveInitializersFromInputs',
  'ir_pass_name': 'RemoveInitializersFromInputsPass',
  'description': 'Remove initializers from inputs.',
  'doc': 'Remove initializers from inputs.\n'
         '\n'
         '    This pass finds all graph inputs that have a const_value and removes them '
         'from the graph.inputs list.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.constant_manipulation.RemoveInitializersFromInputsPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRRemoveInitializersFromInputsOptions',
              'doc': 'Options of OnnxIRRemoveInitializersFromInputs.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-remove-unused-functions',
  'class_name': 'OnnxIRRemoveUnusedFunctions',
  'ir_pass_name': 'RemoveUnusedFunctionsPass',
  'description': "Run onnx_ir's RemoveUnusedFunctionsPass.",
  'doc': "Run onnx_ir's RemoveUnusedFunctionsPass.\n"
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.unused_removal.RemoveUnusedFunctionsPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRRemoveUnusedFunctionsOptions',
              'doc': 'Options of OnnxIRRemoveUnusedFunctions.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-remove-unused-nodes',
  'class_name': 'OnnxIRRemoveUnusedNodes',
  'ir_pass_name': 'RemoveUnusedNodesPass',
  'description': 'Pass for removing unused nodes and initializers (dead code '
                 'elimination).',
  'doc': 'Pass for removing unused nodes and initializers (dead code elimination).\n'
         '\n'
         '    This pass does not modify the model signature (inputs and outputs). It '
         'ensures\n'
         '    that unused nodes and initializers are removed while preserving the '
         'original\n'
         '    contract of the model.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.unused_removal.RemoveUnusedNodesPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRRemoveUnusedNodesOptions',
              'doc': 'Options of OnnxIRRemoveUnusedNodes.',
              'fields': []}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-remove-unused-opsets',
  'class_name': 'OnnxIRRemoveUnusedOpsets',
  'ir_pass_name': 'RemoveUnusedOpsetsPass',
  'description': 'Remove unused opset imports from the model and functions.',
  'doc': 'Remove unused opset imports from the model and functions.\n'
         '\n'
         '    Attributes:\n'
         '        process_functions: Whether to process functions in the model. If True, '
         'the pass will\n'
         '            remove unused opset imports from functions as well. If False, only '
         'the main graph\n'
         '            will be processed.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.unused_removal.RemoveUnusedOpsetsPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRRemoveUnusedOpsetsOptions',
              'doc': 'Options of OnnxIRRemoveUnusedOpsets.\n'
                     '\n'
                     'Attributes:\n'
                     '    process_functions: Whether to process functions in the model. '
                     'If True, the pass will remove unused opset imports from functions '
                     'as well. If False, only the main graph will be processed.',
              'fields': [{'name': 'process_functions',
                          'type': 'bool',
                          'default': True}]}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-shape-inference',
  'class_name': 'OnnxIRShapeInference',
  'ir_pass_name': 'ShapeInferencePass',
  'description': 'This pass performs shape inference on the graph.',
  'doc': 'This pass performs shape inference on the graph.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.shape_inference.ShapeInferencePass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRShapeInferenceOptions',
              'doc': 'Options of OnnxIRShapeInference.\n'
                     '\n'
                     'Attributes:\n'
                     '    check_type: If True, check the types of the inputs and '
                     'outputs.\n'
                     '    strict_mode: If True, use strict mode for shape inference.\n'
                     '    data_prop: If True, use data propagation for shape inference.',
              'fields': [{'name': 'check_type', 'type': 'bool', 'default': True},
                         {'name': 'strict_mode', 'type': 'bool', 'default': True},
                         {'name': 'data_prop', 'type': 'bool', 'default': True}]}},
 {'kind': 'onnx_ir',
  'name': 'onnx-ir-topological-sort',
  'class_name': 'OnnxIRTopologicalSort',
  'ir_pass_name': 'TopologicalSortPass',
  'description': 'Topologically sort graphs and functions in a model.',
  'doc': 'Topologically sort graphs and functions in a model.\n'
         '\n'
         '    The sort is stable, preserving the relative order of nodes that are not\n'
         '    dependent on each other. Read more at :meth:`onnx_ir.Graph.sort`.\n'
         '\n'
         "This is onnx_ir's "
         '``onnx_ir.passes.common.topological_sort.TopologicalSortPass``.',
  'analysis': False,
  'options': {'class': 'OnnxIRTopologicalSortOptions',
              'doc': 'Options of OnnxIRTopologicalSort.',
              'fields': []}},
 {'kind': 'onnxscript',
  'name': 'onnxscript-optimize',
  'options': {'class': 'OnnxscriptOptimizeOptions',
              'doc': 'Options of OnnxscriptOptimize.\n'
                     '\n'
                     'Attributes:\n'
                     '    num_iterations: Number of times the optimization loop is '
                     'repeated.\n'
                     '    onnx_shape_inference: Applies node-level shape-inference as '
                     'part of optimization\n'
                     '    stop_if_no_change: Stop the optimization loop if no change is '
                     'detected in an iteration.\n'
                     '    input_size_limit: Will not apply constant folding to ops with '
                     'any input of size greater than this. Does not apply to special ops '
                     'like Shape() and Size().\n'
                     '    output_size_limit: Will not rewrite any foldable-op into a '
                     'Constant op if the size of the output tensor is greater than '
                     'this.\n'
                     '    inline: If True, inlines all functions in the model.',
              'fields': [{'name': 'num_iterations', 'type': 'int', 'default': 2},
                         {'name': 'onnx_shape_inference',
                          'type': 'bool',
                          'default': True},
                         {'name': 'stop_if_no_change', 'type': 'bool', 'default': True},
                         {'name': 'input_size_limit', 'type': 'int', 'default': 8192},
                         {'name': 'output_size_limit', 'type': 'int', 'default': 262144},
                         {'name': 'inline', 'type': 'bool', 'default': True}]}}]
