"""Run one of the LAPO reference code's training scripts from its checkout and write what it
logged as JSON. Runs in the reference's own environment (its dependencies: doy, tensordict,
funcy, omegaconf, wandb, gym, rich), never in ssilbench's; ``compare.py`` calls it.

    python run_reference.py --lapo CHECKOUT/lapo --script train_lapo_stage1.py \
        --train-chunk 4096 --test-chunk 1024 --warmup 100 --out stage1.json -- \
        env_name=starpilot exp_name=compare lapo_stage1.steps=500 ...

The working directory must hold the reference's ``config.yaml`` and ``expert_data/``, as its
README sets up. Three things differ from running the script bare, each because a short run
on small chunks needs it, none touching a model, a loss or an optimiser:

- the reference's chunk lengths (``TRAIN_CHUNK_LEN`` 32,768 and ``TEST_CHUNK_LEN`` 4,096
  frames, asserted for every chunk) are set to the small chunks' lengths;
- the warm-up of its later stages (1,000 steps, a default of ``get_opt_lr_scheduler`` that
  its schedule requires to be shorter than the stage) is ``--warmup``; stage 1 keeps its 50;
- its Procgen rollouts (``rollout_metrics``) are skipped: the comparison is offline
  accuracy, and a rollout needs the procgen package and minutes of CPU per call.

wandb runs with ``WANDB_MODE=disabled``: nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import runpy
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lapo", type=Path, required=True, help="the checkout's lapo/ folder")
    parser.add_argument("--script", required=True, help="e.g. train_lapo_stage1.py")
    parser.add_argument("--train-chunk", type=int, required=True)
    parser.add_argument("--test-chunk", type=int, required=True)
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument(
        "--dump-latents",
        type=Path,
        default=None,
        help="after the script: its IDM's latents of the train data (npz)",
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("overrides", nargs="*", help="the script's KEY=VALUE config overrides")
    args = parser.parse_args()

    os.environ["WANDB_MODE"] = "disabled"
    os.environ.setdefault("WANDB_SILENT", "true")
    import torch

    torch.set_num_threads(1)
    lapo = args.lapo.resolve()
    sys.path.insert(0, str(lapo))

    import data_loader  # the reference's modules, from its checkout
    import utils

    data_loader.TRAIN_CHUNK_LEN = args.train_chunk
    data_loader.TEST_CHUNK_LEN = args.test_chunk
    make_schedule = utils.get_opt_lr_scheduler

    def get_opt_lr_scheduler(modules, steps, lr, warmup_steps=args.warmup, **kw):
        return make_schedule(modules, steps, lr, warmup_steps=warmup_steps, **kw)

    utils.get_opt_lr_scheduler = get_opt_lr_scheduler
    try:
        import rollout_utils

        rollout_utils.rollout_metrics = lambda **kw: None
    except ImportError:  # schmidtdominik/LAPO has no rollout_utils (its stages roll out in PPO)
        pass

    sys.argv = [args.script, *args.overrides]
    scope = runpy.run_path(str(lapo / args.script), run_name="__main__")

    logger = scope["logger"]
    logged = {}
    for key in logger.keys:
        values = logger.data[key]
        if all(isinstance(v, (int, float)) for v in values):
            logged[key] = {"step": list(logger.data_x[key]), "value": [float(v) for v in values]}
    out = {"logged": logged}
    if "eval_metrics" in scope:  # the latent-action probe the stage-2 scripts run at the start
        out["probe"] = {k: float(v) for k, v in scope["eval_metrics"].items()}
    args.out.write_text(json.dumps(out))

    if args.dump_latents is not None:
        import numpy as np

        idm, data = scope["idm"], scope["train_data"]
        with torch.no_grad():
            labeled = idm.label_chunked(data.td_unfolded[:131072]).select("ta", "la")
        np.savez(args.dump_latents, la=labeled["la"].cpu().numpy(),
                 ta=labeled["ta"][:, -2].cpu().numpy())  # fmt: skip


if __name__ == "__main__":
    main()
