"""The ``build-training-graph`` pass: graphpass's own training graphs, in standard ONNX.

It appends a loss to the model, differentiates it with respect to the trainable
weights with the registered gradient builders (reverse mode, standard ONNX
operators only: stock onnxruntime runs the result) and writes the training-graph
directory (see ``_directory``)::

    graphpass run model.onnx -p train-ready --emit-training-graph train/ -o ready.onnx

The model itself is not changed. The weights it trains are those ``lint-gradients``
would judge (same ``trainable``/``frozen`` options, same default: torch's parameters
when the export records them, else every float initializer). What it needs from earlier
passes it asks for as analyses: the checkpoint ``reconcile-initializers`` filled the
model from (:class:`~graphpass.checkpoint.ReconcileResult`: torch names, tied keys,
keys no initializer holds) and ``lint-gradients``' selection
(:class:`~graphpass.training.rules._model.SelectionReport`, so that a problem of the
same request is reported once). The directory is the one
:func:`~graphpass.training._graphs.build_training_graphs` and
:func:`~graphpass.training._directory.write_training_directory` write from Python with
the same inputs.

Findings: ``GP850`` (info) the directory was written; ``GP851`` (error) a node
cannot be differentiated (the message names it); ``GP852`` (error) no trainable
weight, or none a gradient reaches (nothing is written); ``GP853`` (warning) trainable
weights no gradient reaches, left frozen (when others train);
``GP854`` (warning) a ``trainable``/``frozen`` pattern that matches nothing, or a
requested weight that is not a float initializer; ``GP855`` (error) the directory
cannot be written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from graphpass.checkpoint import ReconcileResult
from graphpass.errors import ModelSaveError
from graphpass.findings import Finding, Severity, shortened_list
from graphpass.framework import Pass, PassContext, PassResult
from graphpass.ir import Model
from graphpass.training import SGD, AdamW, BatchNormMode, Optimizer, RecomputePolicy
from graphpass.training.rules import SelectionReport, trainable_weights

__all__ = ["CODES", "BuildTrainingGraph"]

CODES = {
    "wrote": "GP850",
    "not-differentiable": "GP851",
    "no-trainable": "GP852",
    "unreached": "GP853",
    "selection": "GP854",
    "write": "GP855",
}
"""The finding codes of ``build-training-graph`` (stable)."""


class BuildTrainingGraph(Pass):
    """Write gradient, step and eval graphs in standard ONNX (the model is unchanged)."""

    name = "build-training-graph"
    description = ("Write graphpass's training graphs (gradient, optimizer step, eval) in "
                   "standard ONNX, which stock onnxruntime runs.")
    requires = ("inline-functions",)
    after = ("reconcile-initializers", "detect-missing-buffers", "fix-training-ops",
             "lint-gradients", "remove-unused", "check")
    codes: ClassVar[dict[str, str]] = {
        "GP850": "training-graph directory written",
        "GP851": "a node on the gradient path cannot be differentiated",
        "GP852": "no trainable weight",
        "GP853": "trainable weights no gradient reaches (left frozen)",
        "GP854": "a trainable/frozen pattern matches nothing, or names a non-float weight",
        "GP855": "the directory cannot be written",
    }

    @dataclass
    class Options:
        """Options of ``build-training-graph``.

        Attributes:
            directory: Where the training graphs go (relative to the pipeline file).
            loss: ``mse`` (the mean squared error of the first output against an input
                ``target``), ``crossentropy`` (the first output's logits, classes on the
                last axis, against integer labels ``target``; label -100 is ignored) or
                ``none`` (the first output is the loss).
            loss_inputs: The output the loss reads (default: the first output).
            trainable: Weights to train, as names or globs (default: torch's
                parameters when the export records them, else every float
                initializer; as ``lint-gradients`` chooses).
            frozen: Weights to keep fixed, as names or globs.
            optimizer: ``adamw`` or ``sgd`` (``step.onnx``).
            batch_norm: ``batch-statistics`` (the default): batch normalizations train
                as in torch's ``train()`` mode (each batch normalized with its own
                statistics, the running statistics updated with the node's momentum
                and carried through ``step.onnx``), which is what a model exported
                from ``model.eval()`` was trained with; ``running-statistics``: as
                exported (normalized with the fixed running statistics, as a
                ``BatchNorm`` module in ``eval()`` mode).
            recompute: Activation recomputation: ``none`` (the default: the backward pass
                reads the forward values, kept alive until then) or ``elementwise``
                (the values of cheap elementwise, activation and view nodes, such as
                ``Gelu`` and the ``Transpose`` of a weight, are computed again right
                before the backward nodes that read them, so the runtime frees them
                after the forward pass; see ``graphpass.training._recompute``).
            lr: The learning rate the runner starts with (``lr`` is an input of
                ``step.onnx``; recorded in the manifest).
            betas: AdamW's ``(beta1, beta2)``.
            eps: AdamW's epsilon.
            weight_decay: Weight decay (default 0.01 for AdamW, 0 for SGD, as torch).
            momentum: SGD momentum.
            dampening: SGD dampening.
            nesterov: SGD Nesterov momentum.
        """

        directory: str = ""
        loss: Literal["mse", "crossentropy", "none"] = "mse"
        loss_inputs: list[str] = field(default_factory=list)
        trainable: list[str] = field(default_factory=list)
        frozen: list[str] = field(default_factory=list)
        optimizer: Literal["adamw", "sgd"] = "adamw"
        batch_norm: BatchNormMode = "batch-statistics"
        recompute: RecomputePolicy = "none"
        lr: float = 1e-3
        betas: tuple[float, float] = (0.9, 0.999)
        eps: float = 1e-8
        weight_decay: float | None = None
        momentum: float = 0.0
        dampening: float = 0.0
        nesterov: bool = False

        def __post_init__(self) -> None:
            if not self.directory:
                raise ValueError("give the folder for the training graphs: directory = \"...\"")
            if self.lr <= 0:
                raise ValueError("lr must be positive")

    def run(self, model: Model, context: PassContext) -> PassResult:
        """Build and write the training graphs."""
        options = self.options
        findings: list[Finding] = []
        trainable, frozen = self._weights(model, findings, context)
        if not trainable:
            findings.append(Finding(
                CODES["no-trainable"], Severity.ERROR, "no trainable weight: nothing to train",
                hint="name weights with the trainable option, or check that the model has float "
                     "initializers (run reconcile-initializers to fill them from a checkpoint)"))
            return PassResult(findings=findings)
        # Imported here: listing or planning passes (graphpass passes, plan) never needs
        # autodiff, the builders or the directory writer.
        from graphpass.training import (
            GradientError,
            build_training_graphs,
            registered_builders,
            write_training_directory,
        )

        directory = context.resolve_path(options.directory)
        try:
            graphs = build_training_graphs(
                model, trainable=trainable, frozen=frozen, loss=options.loss,
                loss_inputs=options.loss_inputs, optimizer=self._optimizer(),
                batch_norm=options.batch_norm, recompute_policy=options.recompute,
                builders=registered_builders(context.registry),
                reconciled=context.analysis(ReconcileResult), options=self._recorded())
        except GradientError as error:
            findings.append(Finding(CODES["not-differentiable"], Severity.ERROR, error.message,
                                    node=error.node, hint=error.hint))
            return PassResult(findings=findings)
        if not graphs.manifest["trainable"]:  # every one left frozen: nothing would train
            unreached = graphs.frozen_unreached
            findings.append(Finding(
                CODES["no-trainable"], Severity.ERROR,
                ("no gradient reaches the trainable weight " if len(unreached) == 1 else
                 f"no gradient reaches any of the {len(unreached)} trainable weights ")
                + f"{shortened_list(unreached, 4, quote=True)}: nothing to train, and nothing "
                "was written",
                hint="check that the loss depends on them through differentiable operations "
                     "(torch would give them no gradient either: a weight read only by a "
                     "comparison, a shape or an index has none), or name other weights with "
                     "the trainable option",
                data={"weights": unreached}))
            return PassResult(findings=findings)
        if graphs.frozen_unreached:
            findings.append(Finding(
                CODES["unreached"], Severity.WARNING,
                f"no gradient reaches {len(graphs.frozen_unreached)} trainable weight"
                f"{'s' * (len(graphs.frozen_unreached) != 1)}, left frozen: "
                f"{shortened_list(graphs.frozen_unreached, 4, quote=True)}",
                hint="freeze them, or check that the loss depends on them (torch would "
                     "give them no gradient either)",
                data={"weights": graphs.frozen_unreached}))
        try:
            files = write_training_directory(graphs, directory)
        except ModelSaveError as error:
            findings.append(Finding(CODES["write"], Severity.ERROR, error.message,
                                    hint=error.hint))
            return PassResult(findings=findings)
        reached = graphs.manifest["trainable"]
        findings.append(Finding(
            CODES["wrote"], Severity.INFO,
            f"wrote training graphs for {len(reached)} trainable weight"
            f"{'s' * (len(reached) != 1)} to {directory} ({', '.join(files)})",
            data={"directory": str(directory), "files": files, "trainable": reached,
                  "frozen": graphs.manifest["frozen"],
                  "backward nodes": len(graphs.step.graph) - len(model.graph)}))
        return PassResult(findings=findings, stats={
            "directory": str(directory), "trainable weights": len(reached),
            "gradient nodes": len(graphs.gradient.graph),
            "recomputed values": len(graphs.recomputed.values)})

    def _weights(self, model: Model, findings: list[Finding],
                 context: PassContext) -> tuple[list[str], list[str]]:
        """The weights to train and to freeze: ``lint-gradients``' selection.

        A problem of the request that ``lint-gradients`` already reported for this model
        (its :class:`SelectionReport`, for the same option values: the same fact) is
        not reported again.
        """
        options = self.options
        weights = trainable_weights(
            model.graph, options.trainable, options.frozen, trainer="build-training-graph",
            codes={"no-match": CODES["selection"], "not-float": CODES["selection"]},
            initializers_only=True, reconciled=context.analysis(ReconcileResult))
        linted = context.analysis(SelectionReport)
        seen = linted.reported if linted is not None and linted.asked(
            options.trainable, options.frozen) else frozenset()
        findings.extend(f for f in weights.findings
                        if (f.data["selection"], f.value) not in seen)
        return weights.trainable, weights.frozen

    def _optimizer(self) -> Optimizer:
        o = self.options
        if o.optimizer == "sgd":
            return SGD(momentum=o.momentum, dampening=o.dampening,
                       weight_decay=o.weight_decay or 0.0, nesterov=o.nesterov)
        return AdamW(beta1=o.betas[0], beta2=o.betas[1], eps=o.eps,
                     weight_decay=0.01 if o.weight_decay is None else o.weight_decay)

    def _recorded(self) -> dict[str, Any]:
        o = self.options
        return {"loss": o.loss, "loss_inputs": list(o.loss_inputs),
                "trainable": list(o.trainable), "frozen": list(o.frozen),
                "optimizer": o.optimizer, "batch_norm": o.batch_norm, "recompute": o.recompute,
                "lr": o.lr}

