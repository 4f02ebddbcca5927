"""The runner: train a training-graph directory on stock onnxruntime.

:class:`Trainer` runs ``gradient.onnx`` of a directory ``build-training-graph`` wrote in
one onnxruntime session and applies the optimizer itself, in place::

    from graphpass.training import Trainer

    trainer = Trainer("train/")
    for _ in range(10):
        loss = trainer.step({"x": x, "target": y})
    trainer.save("trained.onnx")                       # the model, trained weights inside
    trainer.save_checkpoint("trained.safetensors")     # under the torch state_dict keys

**Everything a step carries is held once**, as torch holds it: the trainable weights,
their gradients, the optimizer state and the running statistics of batch
normalizations are numpy arrays the trainer allocates once. The session reads the
weights in place and writes the gradients straight into their buffers (one IO binding,
made once: a step binds only the batch, whose arrays the session also reads in
place); the optimizer then updates the weights and its state in place
(:mod:`graphpass.training._updates`, the arithmetic of ``step.onnx`` bit for bit). The
optimizer state starts as zeros made in memory (``np.zeros`` takes no memory until the
first step writes it). A session that computed the new weights itself, as
``step.onnx`` does, would need a second buffer for each of them: that doubles the
weights and both AdamW moments. ``step.onnx`` stays in the directory, the portable
one-run-per-step form of the same step.

**Gradient accumulation**: :meth:`Trainer.step` takes a list of micro-batches and makes
one optimizer step on the mean of their gradients (torch's ``(loss / n).backward()``
per micro-batch), so that a batch too large for memory trains as several small ones.

``eval.onnx`` gets its own session when :meth:`Trainer.evaluate` is first called,
bound to the same arrays. Both sessions take graphpass's memory settings
(:func:`default_session_options`), also when given ``session_options`` of one's own
wherever those leave onnxruntime's default; ``threads`` sets onnxruntime's thread
count. ``providers`` selects onnxruntime's execution providers, for example
``["CUDAExecutionProvider", "CPUExecutionProvider"]`` with onnxruntime-gpu (the
arrays stay in host memory: onnxruntime copies the weights in and the gradients out
each step).

onnxruntime is an optional dependency of graphpass (``pip install graphpass[runtime]``);
this is the only module that imports it, when a :class:`Trainer` is made.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from graphpass.errors import ModelSaveError, first_line
from graphpass.files import load, replace_file, save
from graphpass.ir import Tensor
from graphpass.training._directory import MANIFEST, read_manifest
from graphpass.training._errors import TrainingError
from graphpass.training._graphs import FORMAT_VERSION
from graphpass.training._updates import BLOCK, apply_update

if TYPE_CHECKING:
    from graphpass.training._fit import FitResult
    from graphpass.training._state import SavedState

__all__ = ["Evaluation", "Trainer", "TrainingError", "default_session_options"]

_BUILD_HINT = ("build one with `graphpass run MODEL -o READY.onnx -p train-ready "
               "--emit-training-graph DIR`, or train the model directly with "
               "`graphpass train MODEL --data BATCH.npz`")

Batch = Mapping[str, Any]


@dataclass(frozen=True)
class Evaluation:
    """What :meth:`Trainer.evaluate` computed.

    Attributes:
        loss: The loss on the batch (the model in inference mode).
        outputs: The model's outputs, by name.
    """

    loss: float
    outputs: dict[str, np.ndarray]


def _runtime() -> Any:
    try:
        import onnxruntime
    except ImportError:
        raise TrainingError(
            "training needs onnxruntime, which is not installed",
            hint="pip install graphpass[runtime] (stock onnxruntime; onnxruntime-training "
                 "is not needed)") from None
    return onnxruntime


def default_session_options() -> Any:
    """The ``onnxruntime.SessionOptions`` a :class:`Trainer` uses unless given others.

    onnxruntime's defaults, but ``execution_order = PRIORITY_BASED``: the default order
    walks the graph depth-first from its outputs, running the chain of input gradients
    through every layer before any weight gradient, so every layer's activations stay
    alive to the end of the step; in the graph's order each layer's weight gradients are
    computed as the backward pass reaches it, and activation recomputation
    (``build-training-graph.recompute``) frees what it should (BERT-base at 16 x 128:
    1,737 against 1,782 MiB without recomputation, 1,486 against 1,740 MiB with it).

    And ``enable_mem_pattern = False``: with the memory pattern, onnxruntime allocates
    one block of the planned size from the second run on, while its arena keeps the
    chunks the first run freed, so every step after the first holds both (GPT-2 small at
    4 x 64 tokens: 3,131 MB over the RSS after imports with it, 2,528 MB without, at the
    same step time).

    ``SessionOptions`` given to :class:`Trainer` get both wherever they hold
    onnxruntime's default value (see :class:`Trainer`).
    """
    options = _runtime().SessionOptions()
    for name, value in _memory_settings().items():
        setattr(options, name, value)
    return options


def _memory_settings() -> dict[str, Any]:
    """The session options :func:`default_session_options` changes, with their values."""
    return {"execution_order": _runtime().ExecutionOrder.PRIORITY_BASED,
            "enable_mem_pattern": False}


@contextmanager
def _effective(options: Any, *, memory_settings: bool, threads: int | None) -> Iterator[Any]:
    """``options`` as a session takes them, while it is made.

    With ``memory_settings``, graphpass's memory settings where ``options`` hold
    onnxruntime's defaults; and ``threads``. The changes last while the session is made
    (onnxruntime copies the options into it), so that the caller's object ends as it was.
    """
    stock = _runtime().SessionOptions()
    changes = {name: value for name, value in _memory_settings().items()
               if memory_settings and getattr(options, name) == getattr(stock, name)}
    if threads is not None:
        changes["intra_op_num_threads"] = threads
    before = {name: getattr(options, name) for name in changes}
    try:
        for name, value in changes.items():
            setattr(options, name, value)
        yield options
    finally:
        for name, value in before.items():
            setattr(options, name, value)


class Trainer:
    """Train a training-graph directory on stock onnxruntime (see the module docstring).

    Attributes:
        directory: The training-graph directory.
        manifest: Its ``manifest.json``.
    """

    def __init__(self, directory: str | os.PathLike[str], *, lr: float | None = None,
                 providers: Sequence[str] | None = None, session_options: Any = None,
                 threads: int | None = None, memory_settings: bool = True):
        """Load ``directory`` (written by ``build-training-graph``).

        Args:
            directory: The training-graph directory.
            lr: The learning rate (default: the one the directory was built with).
            providers: onnxruntime execution providers (default: the CPU).
            session_options: ``onnxruntime.SessionOptions`` for both sessions (default:
                :func:`default_session_options`). Where they hold onnxruntime's default
                ``execution_order`` or ``enable_mem_pattern``, the sessions take
                graphpass's instead (unless ``memory_settings`` is false); the object
                itself is not changed.
            threads: onnxruntime's thread count (``intra_op_num_threads``; default:
                what ``session_options`` say, else onnxruntime's choice).
            memory_settings: Give the sessions graphpass's memory settings where
                ``session_options`` leave onnxruntime's defaults (``False``: use them
                exactly as given).

        Raises:
            TrainingError: onnxruntime is not installed, the folder is not a
                training-graph directory (or one of its files is missing or does not
                load), the learning rate is not positive, or ``threads`` is not a
                whole number of at least 1.
        """
        self._ort = _runtime()
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                    or threads < 1):
            raise TrainingError(f"threads must be a whole number of at least 1, not {threads!r}")
        self.directory = Path(directory)
        self.manifest = _read(self.directory)
        self._providers = list(providers or ["CPUExecutionProvider"])
        self._options = session_options if session_options is not None else \
            default_session_options()
        self._memory_settings = memory_settings
        self._threads = threads
        manifest = self.manifest
        self._trainable: list[str] = list(manifest["trainable"])
        self._statistics: list[str] = list(manifest.get("buffers", []))
        self._batch_names = [*manifest["inputs"],
                             *([manifest["target"]] if manifest["target"] else [])]
        self._session = self._open(manifest["files"]["gradient"])
        _check_names(self._session,
                     [*self._batch_names, *self._trainable, *self._statistics],
                     [manifest["loss"]["output"], *manifest["gradients"],
                      *(f"{name}.new" for name in self._statistics)],
                     self.directory / manifest["files"]["gradient"])
        self._arrays = self._initial_values()
        self._grads = {w: np.empty_like(self._arrays[w]) for w in self._trainable}
        self._new_statistics = {s: np.empty_like(self._arrays[s]) for s in self._statistics}
        self._state_of = {w: {kind: self._arrays[f"{w}.{kind}"]
                              for kind in manifest["optimizer"]["state"]}
                          for w in self._trainable}
        self._scratch = {array.dtype: np.empty(2 * BLOCK, array.dtype)
                         for array in self._grads.values()}
        self._lr_given = 0.0
        self.lr = float(manifest["options"].get("lr", 1e-3)) if lr is None else lr
        self._loss = np.zeros((), dtype=self._type_of(self._session.get_outputs()[0].type))
        self._batch_types = {i.name: i for i in self._session.get_inputs()
                             if i.name in self._batch_names}
        ortvalue = self._ort.OrtValue.ortvalue_from_numpy
        self._bound = {name: ortvalue(self._arrays[name])
                       for name in (*self._trainable, *self._statistics)}
        self._binding = self._bind(self._grads)
        self._accumulated: dict[str, np.ndarray] | None = None  # made at the first list
        self._accumulating: Any = None
        self._eval_session: Any = None

    # ---------------------------------------------------------------- loading
    def _open(self, file: str) -> Any:
        path = self.directory / file
        try:
            with _effective(self._options, memory_settings=self._memory_settings,
                            threads=self._threads) as options:
                return self._ort.InferenceSession(str(path), options,
                                                  providers=self._providers)
        except Exception as error:  # onnxruntime's own exception types
            raise TrainingError(f"onnxruntime cannot load {file}: {first_line(error)}",
                                where=str(self.directory),
                                hint="rebuild the directory with this graphpass version; "
                                     + _BUILD_HINT) from None

    def _initial_values(self) -> dict[str, np.ndarray]:
        """Every carried value at step 0, in arrays of its own (writable, C order)."""
        from safetensors import SafetensorError, safe_open

        files = self.manifest["files"]
        values: dict[str, np.ndarray] = {}
        for key in ("weights", "buffers"):
            path = self.directory / files[key]
            try:
                with safe_open(str(path), framework="np") as handle:  # a tensor at a time
                    for name in handle.keys():  # noqa: SIM118 - not a dict
                        values[name] = np.require(handle.get_tensor(name),
                                                  requirements=("C", "W", "O"))
            except (OSError, SafetensorError) as error:
                raise TrainingError(f"cannot read {files[key]}: {first_line(error)}",
                                    where=str(self.directory),
                                    hint="the directory is incomplete; " + _BUILD_HINT) from None
        missing = [name for name in (*self._trainable, *self._statistics) if name not in values]
        if missing:
            raise TrainingError(f"no initial value for {', '.join(map(repr, missing[:5]))} in "
                                "the directory's safetensors files", where=str(self.directory),
                                hint="the directory is incomplete; " + _BUILD_HINT)
        carried: dict[str, np.ndarray] = {}
        step = self.manifest["step"]
        for source, _ in step["carry"]:
            if source == step["step"]:
                carried[source] = np.zeros((), dtype=np.int64)
            elif source in values:
                carried[source] = values[source]
            else:  # optimizer state: <weight>.<kind>, zeros until the first step
                weight = source.rsplit(".", 1)[0]
                carried[source] = np.zeros_like(values[weight])
        return carried

    def _bind(self, grads: Mapping[str, np.ndarray]) -> Any:
        """An IO binding: weights and statistics in, gradients into ``grads``."""
        ortvalue = self._ort.OrtValue.ortvalue_from_numpy
        binding = self._session.io_binding()
        for name, value in self._bound.items():
            binding.bind_ortvalue_input(name, value)
        for weight, grad in zip(self._trainable, self.manifest["gradients"], strict=True):
            binding.bind_ortvalue_output(grad, ortvalue(grads[weight]))
        for name in self._statistics:
            binding.bind_ortvalue_output(f"{name}.new", ortvalue(self._new_statistics[name]))
        binding.bind_ortvalue_output(self.manifest["loss"]["output"], ortvalue(self._loss))
        return binding

    @staticmethod
    def _type_of(type_name: str) -> np.dtype[Any]:
        names = {"tensor(float)": np.float32, "tensor(double)": np.float64,
                 "tensor(float16)": np.float16, "tensor(int64)": np.int64,
                 "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
                 "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}
        if type_name not in names:
            raise TrainingError(f"graphpass's trainer does not handle values of type {type_name}")
        return np.dtype(names[type_name])

    # --------------------------------------------------------------- training
    @property
    def lr(self) -> float:
        """The learning rate of the next step (settable, e.g. by a schedule)."""
        return self._lr_given

    @lr.setter
    def lr(self, value: float) -> None:
        if not isinstance(value, (int, float)) or not np.isfinite(value) or value <= 0:
            raise TrainingError(f"the learning rate must be a positive number, not {value!r}")
        self._lr_given = float(value)

    @property
    def session_options(self) -> Any:
        """The ``onnxruntime.SessionOptions`` the step's session runs with (its own copy)."""
        return self._session.get_session_options()

    @property
    def steps(self) -> int:
        """How many steps the weights have taken (from the directory's start)."""
        return int(self._arrays[self.manifest["step"]["step"]])

    @property
    def values(self) -> Mapping[str, Any]:
        """The current value of everything a step carries, as ``OrtValue`` objects (not copied).

        Trainable weights, optimizer state, running statistics and ``step``, by the
        names ``step.onnx`` reads them under; each wraps the trainer's own array.
        """
        ortvalue = self._ort.OrtValue.ortvalue_from_numpy
        return {name: self._bound[name] if name in self._bound else ortvalue(array)
                for name, array in self._arrays.items()}

    def carried_arrays(self) -> dict[str, np.ndarray]:
        """The live arrays of every value a step carries (not copies), by input name.

        Trainable weights, optimizer state, running statistics and ``step``, by the
        names ``step.onnx`` reads them under. Writing into them in place changes the
        trainer (what :meth:`load_state` does). The arrays stay the same across steps.
        """
        return dict(self._arrays)

    def gradients(self) -> dict[str, np.ndarray]:
        """The gradients of the last step (the trainer's own buffers, not copies), by weight."""
        return dict(self._grads)

    def held_bytes(self) -> dict[str, int]:
        """Bytes of the arrays the trainer holds, by kind (what :meth:`carried_arrays` has).

        ``weights``, ``optimizer_state``, ``statistics`` (with their scratch for the new
        values), ``gradients`` (with the second set that accumulation makes) and
        ``scratch`` (the optimizer's blocks). onnxruntime's own memory (the activations
        of a step) is not included.
        """
        state = [f"{w}.{kind}" for w in self._trainable for kind in self._state_of[w]]
        return {
            "weights": sum(self._arrays[w].nbytes for w in self._trainable),
            "optimizer_state": sum(self._arrays[name].nbytes for name in state),
            "statistics": sum(self._arrays[s].nbytes + self._new_statistics[s].nbytes
                              for s in self._statistics),
            "gradients": sum(g.nbytes for g in self._grads.values())
            + sum(g.nbytes for g in (self._accumulated or {}).values()),
            "scratch": sum(s.nbytes for s in self._scratch.values()),
        }

    def batch_shapes(self) -> dict[str, tuple[int | str | None, ...]]:
        """The shape ``gradient.onnx`` declares for each batch input (a number: fixed)."""
        return {name: tuple(self._batch_types[name].shape) for name in self._batch_names}

    def step(self, batch: Batch | Sequence[Batch]) -> float:
        """Take one optimizer step on ``batch``; return its loss (before the step).

        Args:
            batch: The model's inputs and ``target`` (for a loss that takes one), by
                name, as numpy arrays (read in place when their type and layout
                already fit). A list of such batches (micro-batches) makes one step on
                the mean of their gradients; the loss returned is the mean of theirs,
                and batch normalizations update their running statistics once per
                micro-batch, as in torch.

        Raises:
            TrainingError: A batch name is missing or unknown, an array has the
                wrong element type or shape, the list is empty, or onnxruntime fails
                to run the step.
        """
        micro = list(batch) if isinstance(batch, Sequence) else [batch]
        if not micro:
            raise TrainingError("step() was given an empty list of batches",
                                hint="give a batch, or a list of one or more micro-batches")
        loss = 0.0
        for index, one in enumerate(micro):
            loss += self._run_gradient(one, first=index == 0)
            if index:
                for weight in self._trainable:
                    assert self._accumulated is not None
                    self._grads[weight] += self._accumulated[weight]
        if len(micro) > 1:
            scale = 1.0 / len(micro)
            for grad in self._grads.values():
                np.multiply(grad, grad.dtype.type(scale), out=grad)
        self._apply_optimizer()
        return loss / len(micro)

    def _run_gradient(self, batch: Batch, *, first: bool) -> float:
        """Run ``gradient.onnx`` on ``batch``: into the gradient buffers, or the second set."""
        arrays = self._batch(batch, self._batch_types, "step")
        if first:
            binding = self._binding
        else:
            if self._accumulating is None:
                self._accumulated = {w: np.empty_like(g) for w, g in self._grads.items()}
                self._accumulating = self._bind(self._accumulated)
            binding = self._accumulating
        bound = [self._bind_array(binding, name, array) for name, array in arrays.items()]
        try:
            self._session.run_with_iobinding(binding)
        except Exception as error:  # onnxruntime's own exception types
            raise TrainingError(f"onnxruntime could not run the step: {first_line(error)}",
                                where=str(self.directory / self.manifest["files"]["gradient"]),
                                hint="check the batch's shapes against the model's inputs"
                                ) from None
        del bound  # the arrays were read in place; the binding may let go of them now
        for name in self._statistics:
            np.copyto(self._arrays[name], self._new_statistics[name])
        return float(self._loss)

    def _apply_optimizer(self) -> None:
        step_name = self.manifest["step"]["step"]
        taken = int(self._arrays[step_name])
        optimizer = self.manifest["optimizer"]
        for weight in self._trainable:
            array = self._arrays[weight]
            apply_update(optimizer, array, self._grads[weight], self._state_of[weight],
                         lr=self._lr_given, step=taken, scratch=self._scratch[array.dtype])
        self._arrays[step_name][...] = taken + 1

    def _bind_array(self, binding: Any, name: str, array: np.ndarray) -> Any:
        """Bind ``array`` as input ``name``: the session reads its memory (no copy)."""
        value = self._ort.OrtValue.ortvalue_from_numpy(array)
        binding.bind_ortvalue_input(name, value)
        return value

    def _batch(self, batch: Batch, declared: Mapping[str, Any],
               action: str) -> dict[str, np.ndarray]:
        if not isinstance(batch, Mapping):
            raise TrainingError(f"a batch is a mapping of input names to arrays, not "
                                f"{type(batch).__name__}",
                                hint=f"a {action} takes {', '.join(self._batch_names)}")
        names = self._batch_names
        unknown = [name for name in batch if name not in names]
        missing = [name for name in names if name not in batch]
        if unknown or missing:
            problems = []
            if missing:
                problems.append(f"no {', '.join(map(repr, missing))}")
            if unknown:
                problems.append(f"{', '.join(map(repr, unknown))}, which the model does not "
                                "take")
            raise TrainingError(f"the batch has {' and '.join(problems)}",
                                hint=f"a {action} takes {', '.join(names)}")
        arrays = {}
        for name in names:
            info = declared[name]
            arrays[name] = _fitted(name, batch[name], self._type_of(info.type), info.shape)
        return arrays

    # ------------------------------------------------------------- evaluating
    def evaluate(self, batch: Mapping[str, Any]) -> Evaluation:
        """The loss and the model's outputs on ``batch`` with the current weights.

        Runs ``eval.onnx`` (batch normalizations in inference mode, reading the
        current running statistics, as ``model.eval()``); nothing changes.

        Raises:
            TrainingError: As :meth:`step`.
        """
        if self._eval_session is None:
            self._eval_session = self._open(self.manifest["files"]["eval"])
        session = self._eval_session
        declared = {i.name: i for i in session.get_inputs()}
        arrays = self._batch(batch, declared, "evaluation")
        binding = session.io_binding()
        bound = [self._bind_array(binding, name, array) for name, array in arrays.items()]
        for name in declared:
            if name not in arrays:
                binding.bind_ortvalue_input(name, self._bound[name])
        for output in session.get_outputs():
            binding.bind_output(output.name, "cpu")
        try:
            session.run_with_iobinding(binding)
        except Exception as error:  # onnxruntime's own exception types
            raise TrainingError(f"onnxruntime could not evaluate: {first_line(error)}",
                                where=str(self.directory / self.manifest["files"]["eval"]),
                                hint="check the batch's shapes against the model's inputs"
                                ) from None
        del bound
        results = dict(zip([o.name for o in session.get_outputs()],
                           binding.copy_outputs_to_cpu(), strict=True))
        loss = float(results.pop(self.manifest["loss"]["output"]))
        return Evaluation(loss, results)

    # ----------------------------------------------------------------- saving
    def weights(self) -> dict[str, np.ndarray]:
        """Copies of the trained weights and running statistics, by initializer name."""
        names = [*self.manifest["trainable"], *self.manifest.get("buffers", [])]
        return {name: self._arrays[name].copy() for name in names}

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model with the trained weights (and running statistics) inside.

        The model is the one the directory was built from (after the passes before
        ``build-training-graph``: functions inlined, weights filled), written with
        :func:`graphpass.save` (atomic). Its data files are its own: the frozen weights
        the directory keeps in its shared ``frozen.data`` are read and written with the
        trained ones, embedded or, for large models, in ``<path>.data`` (the name of
        ``path`` with ``.data`` added), never in a copy named after the directory's file.

        Raises:
            ModelSaveError: The file cannot be written (nothing is changed on disk).
        """
        model = load(self.directory / self.manifest["files"]["model"])
        for name in (*self.manifest["trainable"], *self.manifest.get("buffers", [])):
            model.graph.set_initializer(Tensor.from_array(name, self._arrays[name]))
        for name, tensor in list(model.graph.initializers.items()):
            if tensor.is_external:  # frozen weights in the directory's shared data file
                model.graph.set_initializer(Tensor.from_array(name, tensor.numpy()))
        return save(model, path)

    def checkpoint(self) -> dict[str, np.ndarray]:
        """The trained model's torch ``state_dict``: what a strict ``load_state_dict`` takes.

        Every key the manifest's ``torch_state`` lists (tied weights under each of
        their names, buffers the export dropped from the user's checkpoint, keys as
        that checkpoint spelled them): see :mod:`graphpass.training._torch_checkpoint`.

        Raises:
            TrainingError: A key of the model's ``state_dict()`` cannot be written (named).
        """
        from graphpass.training._torch_checkpoint import checkpoint_arrays

        return checkpoint_arrays(self)

    def save_checkpoint(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`checkpoint` as a safetensors file (atomic).

        Load it into the torch model with ``model.load_state_dict(
        safetensors.torch.load_file(path), strict=True)``.

        Raises:
            TrainingError: A key of the model's ``state_dict()`` cannot be written (named).
            ModelSaveError: The file cannot be written (nothing is changed on disk).
        """
        from safetensors.numpy import save_file

        target = Path(path)
        arrays = self.checkpoint()
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            replace_file(target, lambda tmp: save_file(arrays, str(tmp), metadata={"format": "pt"}),
                         step="checkpoint")
        except OSError as error:
            raise ModelSaveError(f"cannot write ({error.strerror})", where=str(target)) from None
        return target

    # ------------------------------------------------------ state and the loop
    def save_state(self, directory: str | os.PathLike[str], *,
                   run: Mapping[str, Any] | None = None) -> Path:
        """Write the whole state (weights, optimizer state, statistics, step, lr), atomically.

        See :mod:`graphpass.training._state`; ``run`` adds entries (what :meth:`fit`
        needs to resume). Returns the snapshot folder written.

        Raises:
            ModelSaveError: The folder cannot be written (the previous state stays).
        """
        from graphpass.training._state import save_state

        return save_state(self, directory, run=run)

    def load_state(self, directory: str | os.PathLike[str]) -> SavedState:
        """Restore a state :meth:`save_state` wrote: the next step continues that run.

        Raises:
            TrainingError: No state there, or one that does not fit this trainer.
        """
        from graphpass.training._state import load_state

        saved = load_state(self, directory)
        assert saved is not None
        return saved

    def resume(self, directory: str | os.PathLike[str]) -> SavedState | None:
        """:meth:`load_state` if a state was saved in ``directory``, else ``None``."""
        from graphpass.training._state import load_state

        return load_state(self, directory, missing_ok=True)

    def fit(self, batches: Any, **options: Any) -> FitResult:
        """Train for epochs or steps, with evaluation, schedules, saving and resuming.

        ``batches``: :class:`~graphpass.training._data.Batches`, a list of batches, or
        a function of the epoch. The options are :func:`graphpass.training._fit.fit`'s
        (``epochs``, ``steps``, ``eval_batches``, ``eval_every``, ``accumulate``,
        ``schedule``, ``warmup``, ``callback``, ``log``, ``state_dir``,
        ``save_every``, ``resume`` ...).
        """
        from graphpass.training._fit import fit

        return fit(self, batches, **options)

    def __repr__(self) -> str:
        return (f"Trainer({str(self.directory)!r}: {len(self.manifest['trainable'])} weights, "
                f"{self.manifest['optimizer']['kind']}, lr {self.lr:g}, step {self.steps})")


def _read(directory: Path) -> dict[str, Any]:
    if not directory.is_dir():
        raise TrainingError("no such folder" if not directory.exists() else "not a folder",
                            where=str(directory), hint=_BUILD_HINT)
    manifest = read_manifest(directory)
    if manifest is None:
        raise TrainingError(f"not a graphpass training-graph directory (no valid {MANIFEST})",
                            where=str(directory), hint=_BUILD_HINT)
    version = manifest.get("version")
    if version != FORMAT_VERSION:
        newer = isinstance(version, int) and version > FORMAT_VERSION
        raise TrainingError(
            f"the directory has format version {version}; this graphpass reads version "
            f"{FORMAT_VERSION}", where=str(directory),
            hint="upgrade graphpass" if newer else "rebuild it: " + _BUILD_HINT)
    missing = [file for file in manifest["files"].values() if not (directory / file).exists()]
    if missing:
        raise TrainingError(f"the directory has no {', '.join(missing)}", where=str(directory),
                            hint="it is incomplete; " + _BUILD_HINT)
    return manifest


def _check_names(session: Any, inputs: Sequence[str], outputs: Sequence[str],
                 where: Path) -> None:
    found_inputs = [i.name for i in session.get_inputs()]
    found_outputs = [o.name for o in session.get_outputs()]
    if found_inputs != list(inputs) or found_outputs != list(outputs):
        raise TrainingError("step.onnx does not have the inputs and outputs its manifest "
                            "lists", where=str(where), hint="rebuild the directory; "
                            + _BUILD_HINT)


def _fitted(name: str, value: Any, dtype: np.dtype[Any],
            shape: Sequence[int | str | None]) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype`` (no copy when it already is one)."""
    array = np.asarray(value)
    if array.dtype != dtype:
        if not np.can_cast(array.dtype, dtype, casting="same_kind"):
            raise TrainingError(f"batch array {name!r} holds {array.dtype}, and the model "
                                f"takes {dtype}", hint=f"convert it: .astype(np.{dtype})")
        array = array.astype(dtype)
    if array.ndim != len(shape) or any(isinstance(d, int) and d != n
                                       for d, n in zip(shape, array.shape, strict=False)):
        shown = ", ".join(str(d) if d is not None else "?" for d in shape)
        named = any(not isinstance(d, int) for d in shape)
        raise TrainingError(f"batch array {name!r} has shape {list(array.shape)}, and the "
                            f"model takes [{shown}]",
                            hint="named dimensions may take any size (the same size wherever "
                                 "the name appears); numbers are fixed" if named else
                            "the model was exported with these fixed sizes; give arrays of "
                            "those shapes, or export it with dynamic axes")
    return np.require(array, requirements="C")
