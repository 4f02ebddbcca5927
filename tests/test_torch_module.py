"""graphpass.torch.Module: a torch module trained through onnxruntime in torch's own loop.

Every check compares with the same module run by torch eager (a deep copy, same seed):
outputs, ``torch.autograd``'s gradients, the losses and weights of AdamW steps with
gradient clipping, running statistics.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from _torch_beside import gradient_mismatches, step_both, wrapped_copy

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

import graphpass  # noqa: E402
import graphpass.torch  # noqa: E402
from graphpass.torch._module import ExportError, PreparationError  # noqa: E402

nn = torch.nn
pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore")]


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 16, bias=False)
        self.bn = nn.BatchNorm1d(16)
        self.fc2 = nn.Linear(16, 16)
        self.frozen = nn.Linear(16, 16)
        self.frozen.requires_grad_(False)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.bn(self.fc1(x)))
        return self.out(torch.tanh(self.frozen(torch.nn.functional.gelu(self.fc2(h)))))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.ln = nn.LayerNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(torch.relu(self.fc(x)))


class Seed(nn.Module):
    """The seed user's model: a block used twice, exported as a function."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = Block()
        self.block2 = Block()
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block2(self.block1(x)))


def _pair(factory, **options):
    torch.manual_seed(0)
    reference = factory()
    return reference, *wrapped_copy(reference, **options)


def _largest_difference(first: nn.Module, second: nn.Module) -> float:
    return max((a - b).abs().max().item() for a, b in zip(
        first.parameters(), second.parameters(), strict=True))


def test_a_torch_loop_trains_as_torch_does_with_a_head_frozen_weights_and_batch_norm():
    reference, model, wrapped = _pair(Net)
    stem_ref = nn.Linear(5, 6, bias=False)  # a bias before batch norm has no gradient: AdamW
    # would move it by its rounding noise
    stem = copy.deepcopy(stem_ref)  # a torch module before the wrapped one: input gradients
    head_ref = nn.Linear(4, 2)
    head = copy.deepcopy(head_ref)  # and one after it
    frozen_before = model.frozen.weight.clone()
    params_ref = [*stem_ref.parameters(), *reference.parameters(), *head_ref.parameters()]
    params = [*stem.parameters(), *wrapped.parameters(), *head.parameters()]
    opt_ref = torch.optim.AdamW(params_ref, lr=1e-2)
    opt = torch.optim.AdamW(params, lr=1e-2)
    generator = torch.Generator().manual_seed(1)
    for step in range(10):
        batch = 4 + step % 3  # new batch sizes: no new export
        x = torch.randn(batch, 5, generator=generator)
        y = torch.randn(batch, 2, generator=generator)
        out_ref, out = reference(stem_ref(x)), wrapped(stem(x))
        assert torch.allclose(out, out_ref, atol=1e-5), step
        loss_ref = ((head_ref(out_ref) - y) ** 2).mean()
        loss = ((head(out) - y) ** 2).mean()
        loss_ref.backward()
        loss.backward()
        if step == 0:
            assert gradient_mismatches(reference, model) == []
            assert gradient_mismatches(stem_ref, stem) == []
        step_both((opt_ref, opt), clip=0.5)
        assert loss.item() == pytest.approx(loss_ref.item(), rel=1e-5, abs=1e-6), step
    assert wrapped.exports == 1
    assert _largest_difference(reference, model) < 1e-4
    assert torch.equal(model.frozen.weight, frozen_before)
    assert model.frozen.weight.grad is None
    assert torch.allclose(model.bn.running_mean, reference.bn.running_mean, atol=1e-5)
    assert torch.allclose(model.bn.running_var, reference.bn.running_var, atol=1e-5)
    assert int(model.bn.num_batches_tracked) == int(reference.bn.num_batches_tracked) == 10
    reference.eval()
    wrapped.eval()
    x = torch.randn(3, 6)
    with torch.no_grad():
        assert torch.allclose(wrapped(x), reference(x), atol=1e-5)


def test_the_seeds_module_exported_with_functions_trains_four_layer_norm_tensors():
    reference, model, wrapped = _pair(
        Seed, export={"dynamo": False, "export_modules_as_functions": {Block}})
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    for _ in range(20):
        x, y = torch.randn(4, 8), torch.randn(4, 3)
        for net, opt_ in ((reference, opt_ref), (wrapped, opt)):
            loss = ((net(x) - y) ** 2).mean()
            loss.backward()
            opt_.step()
            opt_.zero_grad()
    assert _largest_difference(reference, model) < 1e-4
    assert not torch.equal(model.block1.ln.weight, model.block2.ln.weight)


def test_parameters_and_state_dict_are_the_models_own():
    _, model, wrapped = _pair(Seed)
    assert [id(p) for p in wrapped.parameters()] == [id(p) for p in model.parameters()]
    state = wrapped.state_dict()
    assert list(state) == list(model.state_dict())
    bare = Seed()
    bare.load_state_dict(state, strict=True)
    wrapped.load_state_dict(Seed().state_dict(), strict=True)


def test_onnxruntime_reads_the_parameters_in_place():
    """Changing a weight in place changes the next output: nothing holds a copy."""
    _, model, wrapped = _pair(Seed)
    x = torch.randn(2, 8)
    with torch.no_grad():
        before = wrapped(x).clone()
        model.head.bias.add_(1.0)
        assert torch.allclose(wrapped(x), before + 1.0, atol=1e-6)
    assert wrapped.exports == 1


def test_a_new_rank_exports_again_and_keyword_only_inputs_work():
    class Scaled(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
            return self.fc(x) * scale

    reference, _, wrapped = _pair(Scaled)
    scale = torch.tensor(2.0)
    for shape in ((3, 4), (2, 5, 4), (6, 4)):
        x = torch.randn(*shape)
        assert torch.allclose(wrapped(x, scale=scale), reference(x, scale=scale), atol=1e-6)
    assert wrapped.exports == 2  # rank 2, rank 3; the second rank-2 size reuses the first


def test_a_forward_that_returns_a_python_number_is_refused_clearly():
    class Counting(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor):
            return self.fc(x), 3.0

    wrapped = graphpass.torch.Module(Counting())
    with pytest.raises(ExportError, match=r"returns a float .*tensors only"):
        wrapped(torch.randn(2, 4))


class Running(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(self.conv(x), dim=-1)


class WithRunning(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.running = Running()
        self.head = nn.Conv2d(2, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.running(x))


def test_an_op_without_gradient_builder_is_named_and_the_fallback_runs_torch():
    x = torch.randn(1, 2, 4, 4)
    with pytest.raises(PreparationError, match=r"CumSum") as caught:
        graphpass.torch.Module(WithRunning())(x)
    # the op, the node and the torch module it came from (the export's scope)
    assert "module 'running' (Running), node " in str(caught.value)
    assert "fallback=True" in caught.value.hint
    reference, _, wrapped = _pair(Running, fallback=True)
    with pytest.warns(RuntimeWarning, match="runs Running in torch"):
        out = wrapped(x)
    assert torch.allclose(out, reference(x))
    out.sum().backward()  # torch's own autograd, on the model's parameters
    assert next(wrapped.parameters()).grad is not None


def test_dropout_in_train_mode_draws_its_own_mask_with_torchs_statistics():
    """onnxruntime's random stream is not torch's: the masks differ, their law does not."""
    class Dropping(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = nn.Parameter(torch.ones(4096))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.dropout(x * self.scale, p=0.25, training=self.training)

    wrapped = graphpass.torch.Module(Dropping())
    out = wrapped(torch.ones(8, 4096))
    kept = out != 0
    assert 0.73 < kept.float().mean().item() < 0.77
    assert torch.allclose(out[kept], torch.full_like(out[kept], 1 / 0.75))
    out.sum().backward()
    # Each element's gradient is its mask over the batch, scaled as torch scales it.
    expected = kept.float().sum(0) / 0.75
    assert torch.allclose(wrapped.module.scale.grad, expected, atol=1e-4)
    wrapped.eval()
    assert torch.equal(wrapped(torch.ones(2, 4096)), torch.ones(2, 4096))


def test_distributed_data_parallel_over_two_processes_equals_one_process(tmp_path):
    import socket
    import subprocess
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    try:
        import _ddp_worker as worker
    finally:
        sys.path.pop(0)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    out = tmp_path / "ddp.pt"
    run = subprocess.run([sys.executable, worker.__file__, str(out), port],
                         capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    found = torch.load(out)
    reference = worker.model()
    optimizer = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    for x, y in worker.batches():
        loss = ((reference(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    for key, value in reference.state_dict().items():
        assert torch.allclose(found["state"][key], value, atol=1e-5), key


def _tiny_bert():
    import transformers

    config = transformers.BertConfig(
        vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return transformers.BertForSequenceClassification(config)


def _tiny_gpt2():
    import transformers

    config = transformers.GPT2Config(vocab_size=97, n_embd=32, n_layer=2, n_head=4,
                                     n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0, use_cache=False)
    return transformers.GPT2LMHeadModel(config)


@pytest.mark.parametrize("factory", [_tiny_bert, _tiny_gpt2], ids=["bert", "gpt2-tied"])
def test_hugging_face_models_train_in_torchs_loop_with_their_own_outputs(factory):
    pytest.importorskip("transformers")
    reference, model, wrapped = _pair(factory)
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-3)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-3)
    generator = torch.Generator().manual_seed(2)
    for step in range(3):
        ids = torch.randint(0, 97, (2 + step, 5 + step), generator=generator)
        labels = (torch.randint(0, 2, (2 + step,), generator=generator)
                  if factory is _tiny_bert else ids)
        out_ref = reference(input_ids=ids, labels=labels)
        out = wrapped(input_ids=ids, labels=labels)
        assert type(out) is type(out_ref)
        assert torch.allclose(out.logits, out_ref.logits, atol=1e-5)
        out_ref.loss.backward()
        out.loss.backward()
        if step == 0:
            assert gradient_mismatches(reference, model) == []
        step_both((opt_ref, opt), clip=1.0)
        assert out.loss.item() == pytest.approx(out_ref.loss.item(), rel=1e-5)
    assert wrapped.exports == 1  # batch and sequence sizes stay dynamic


def test_hugging_faces_trainer_gives_the_unwrapped_runs_losses(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    torch.manual_seed(0)
    base = _tiny_bert()
    generator = torch.Generator().manual_seed(1)
    data = [{"input_ids": torch.randint(0, 97, (8,), generator=generator),
             "labels": torch.randint(0, 2, (), generator=generator)} for _ in range(16)]

    def losses(model, folder):
        args = transformers.TrainingArguments(
            output_dir=str(tmp_path / folder), per_device_train_batch_size=4, max_steps=4,
            learning_rate=1e-3, logging_steps=1, report_to=[], use_cpu=True, seed=0,
            save_strategy="no", disable_tqdm=True)
        trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
        trainer.train()
        return [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]

    bare = losses(copy.deepcopy(base), "bare")
    wrapped = losses(graphpass.torch.Module(copy.deepcopy(base)), "wrapped")
    assert len(bare) == 4
    assert wrapped == pytest.approx(bare, rel=1e-5)


def test_a_training_step_copies_no_weight():
    """The parameters are bound where torch keeps them: a step allocates far less than the
    weights' size on the Python side (tracemalloc sees numpy's and Python's allocations)."""
    import tracemalloc

    class Wide(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(1024, 1024)  # 4 MiB of weights
            self.out = nn.Linear(1024, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(torch.relu(self.fc(x)))

    wrapped = graphpass.torch.Module(Wide())
    x = torch.randn(2, 1024)
    wrapped(x).sum().backward()  # export and sessions
    tracemalloc.start()
    try:
        for _ in range(3):
            wrapped(x).sum().backward()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    weights = sum(p.numel() * p.element_size() for p in wrapped.parameters())
    assert peak < weights / 20, (peak, weights)


def test_gradients_accumulate_in_grad_and_hooks_see_them():
    reference, model, wrapped = _pair(Seed)
    x = torch.randn(3, 8)
    seen = []
    model.head.weight.register_hook(lambda grad: seen.append(grad.clone()))
    for _ in range(2):  # two micro-batches, no zero_grad between them
        wrapped(x).pow(2).mean().backward()
        reference(x).pow(2).mean().backward()
    assert len(seen) == 2
    assert torch.allclose(model.head.weight.grad, 2 * seen[0], atol=1e-6)
    for a, b in zip(reference.parameters(), model.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5)


def test_a_legacy_export_that_merges_equal_parameters_still_trains_them_apart():
    """With the exporter's own defaults the two fresh LayerNorms are merged into one
    initializer (block2.ln.weight = Identity(block1.ln.weight)); train-ready splits them."""
    reference, model, wrapped = _pair(
        Seed, export={"dynamo": False, "export_modules_as_functions": {Block},
                      "keep_initializers_as_inputs": False, "do_constant_folding": True})
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    for _ in range(5):
        x, y = torch.randn(4, 8), torch.randn(4, 3)
        for net, opt_ in ((reference, opt_ref), (wrapped, opt)):
            ((net(x) - y) ** 2).mean().backward()
            opt_.step()
            opt_.zero_grad()
    assert _largest_difference(reference, model) < 1e-4
    assert not torch.equal(model.block1.ln.weight, model.block2.ln.weight)


def test_a_tensor_off_the_cpu_is_refused_clearly():
    wrapped = graphpass.torch.Module(nn.Linear(2, 2).to("meta"))
    with pytest.raises(graphpass.GraphpassError, match=r"CPU provider.*on meta"):
        wrapped(torch.randn(1, 2))


class _StandardizedConv(torch.nn.Conv2d):
    """A convolution whose weight is standardized in ``forward`` (BiT's), by
    ``batch_norm(w, None, None, training=True)``: no running statistics."""

    def forward(self, x: Any) -> Any:
        w = self.weight.reshape(1, self.out_channels, -1)
        w = torch.nn.functional.batch_norm(w, None, None, training=True, momentum=0.0,
                                           eps=1e-6).reshape_as(self.weight)
        return torch.nn.functional.conv2d(x, w, self.bias, self.stride, self.padding)


class _StandardizedNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = _StandardizedConv(3, 6, 3, padding=1, bias=False)  # before a BatchNorm
        self.norm = torch.nn.BatchNorm2d(6)
        self.head = torch.nn.Linear(6, 4)

    def forward(self, x: Any) -> Any:
        return self.head(torch.relu(self.norm(self.conv(x))).mean((2, 3)))


@pytest.mark.parametrize("mode", ["eval", "train"])
def test_a_weight_standardized_in_forward_trains_as_torch(mode: str) -> None:
    """The export reads statistics computed from the weight: they carry its gradient, and
    in train() the node keeps them (it has no running statistics); the real BatchNorm
    beside it trains with batch statistics."""
    torch.manual_seed(0)
    reference = _StandardizedNet().train(mode == "train")
    model, wrapped = wrapped_copy(reference)
    x = torch.randn(4, 3, 8, 8)
    target = torch.randn(4, 4)
    opt_ref = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
    for step in range(3):
        loss_ref = torch.nn.functional.mse_loss(reference(x), target)
        loss = torch.nn.functional.mse_loss(wrapped(x), target)
        loss_ref.backward()
        loss.backward()
        assert abs(loss.item() - loss_ref.item()) <= 1e-5 * abs(loss_ref.item()), step
        assert gradient_mismatches(reference, model, rtol=1e-4) == [], step
        step_both((opt_ref, opt))
    for a, b in zip(reference.norm.buffers(), model.norm.buffers(), strict=True):
        assert torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["mobilenet_v1", "efficientnet"])
def test_batch_statistics_of_real_conv_nets_train_as_torch_where_float32_can_follow(name):
    """The zoo judges these two ``undecided`` in train(): at 2 images of 32 pixels their last
    batch norms see 2 values a channel, and float32 cannot follow torch's trajectory
    (``tests/zoo/torch_module.py``). At 8 images of 64 pixels it can: outputs, gradients,
    losses (SGD with momentum) and running statistics equal torch's."""
    from zoo.sweep_cases import SWEEP_CASES

    (case,) = [c for c in SWEEP_CASES if c.name == name]
    torch.manual_seed(0)
    reference = case.wrapped().train()
    for module in reference.modules():  # onnxruntime's random stream is not torch's
        if isinstance(module, nn.Dropout):
            module.eval()
    model, wrapped = wrapped_copy(reference)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn(8, 3, 64, 64, generator=generator)
    # SGD: AdamW's first steps move a weight whose gradient is rounding noise by its full
    # learning rate, so float32 could not follow torch's trajectory, whoever computes it
    opt_ref = torch.optim.SGD(reference.parameters(), lr=1e-2, momentum=0.9)
    opt = torch.optim.SGD(wrapped.parameters(), lr=1e-2, momentum=0.9)
    target = None
    for step in range(3):
        out_ref, out = reference(x), wrapped(x)
        assert _relative_to_largest(out, out_ref) < 1e-4, step
        if target is None:
            target = torch.randn(out_ref.shape, generator=generator)
        loss_ref = torch.nn.functional.mse_loss(out_ref, target)
        loss = torch.nn.functional.mse_loss(out, target)
        loss_ref.backward()
        loss.backward()
        assert abs(loss.item() - loss_ref.item()) <= 1e-5 * abs(loss_ref.item()), step
        if step == 0:  # each gradient against its largest, or a thousandth of the model's
            # (a gradient of 1e-13 is rounding noise: EfficientNet's last norms cancel them)
            largest = max(float(p.grad.abs().max()) for p in reference.parameters())
            for (key, a), b in zip(reference.named_parameters(), model.parameters(),
                                   strict=True):
                scale = max(float(a.grad.abs().max()), 1e-3 * largest)
                assert float((b.grad - a.grad).abs().max()) < 1e-3 * scale, key
        step_both((opt_ref, opt), clip=1.0)
    for (key, a), b in zip(reference.named_buffers(), model.buffers(), strict=True):
        if "running" in key:
            assert _relative_to_largest(b, a) < 1e-4, key


def _relative_to_largest(value: Any, reference: Any) -> float:
    return float((value - reference).abs().max()) / max(float(reference.abs().max()), 1e-12)
