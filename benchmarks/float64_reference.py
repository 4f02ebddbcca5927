"""How far float32 training runs are from the exact (float64) trajectory.

``benchmarks/real_sizes.py`` compares each trainer's losses to torch's float32 run. On
a model whose trajectory is sensitive to rounding (MobileNetV2 with batch statistics
over 4 images), torch's own float32 run leaves float64's within a few steps, so a
difference to it does not say which side rounds. This runs torch in float64 and in
float32 and graphpass's ``Trainer`` on the tier's cached training directory, with the
same initial weights, batch and AdamW, and prints each float32 run's relative distance
to float64's loss per step.

Usage (after ``real_sizes.py`` has built the model's directory)::

    .venv/bin/python benchmarks/float64_reference.py [--model mobilenet-v2] [--steps 6]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
import real_sizes


def torch_losses(spec: real_sizes.Spec, batch: dict[str, Any], dtype: Any,
                 steps: int) -> list[float]:
    """torch eager's first ``steps`` losses in ``dtype`` (batch norms in train mode)."""
    import torch

    model = real_sizes.build_model(spec).to(dtype)
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.train()
    inputs = [torch.from_numpy(batch[name]).to(dtype) if batch[name].dtype.kind == "f"
              else torch.from_numpy(batch[name]) for name in spec.input_names]
    target = torch.from_numpy(batch["target"]).to(dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=real_sizes.LR, betas=(0.9, 0.999),
                                  eps=1e-8, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(*inputs), target)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="mobilenet-v2", choices=sorted(real_sizes.FULL))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--cache", default=str(real_sizes.CACHE))
    args = parser.parse_args()
    import torch

    from graphpass.training import Trainer

    torch.set_num_threads(real_sizes.THREADS)
    folder = Path(args.cache) / "full" / args.model
    if not (folder / "graphpass" / "manifest.json").exists():
        print(f"no training directory under {folder}: run benchmarks/real_sizes.py "
              f"--models {args.model} first", file=sys.stderr)
        return 2
    spec = real_sizes.FULL[args.model]
    batch = dict(np.load(folder / "export" / "batch.npz"))
    exact = torch_losses(spec, batch, torch.float64, args.steps)
    single = torch_losses(spec, batch, torch.float32, args.steps)
    trainer = Trainer(folder / "graphpass", lr=real_sizes.LR)
    ours = [float(trainer.step(batch)) for _ in range(args.steps)]
    print("| step | torch float64 | torch float32 | graphpass | torch32 vs 64 | graphpass vs 64 "
          "| graphpass vs torch32 |")
    print("|---|---|---|---|---|---|---|")
    for i, (a, b, c) in enumerate(zip(exact, single, ours, strict=True), 1):
        print(f"| {i} | {a:.7f} | {b:.7f} | {c:.7f} | {abs(b - a) / a:.1e} | "
              f"{abs(c - a) / a:.1e} | {abs(c - b) / b:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
