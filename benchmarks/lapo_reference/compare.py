"""LAPO and LAPO+ by the reference code and by ssilbench, each through its own entry points, on
the same imported chunk set: the latent-action probe and the decoded-action accuracies side
by side.

    python benchmarks/lapo_reference/compare.py --reference /tmp/lapo_ref \
        --reference-python /work/lapo_ref_venv/bin/python --work /tmp/lapo_compare

``--reference`` is an extracted checkout of the paper's fork ``sachaMorin/lapo-plus`` (its
LAPO+ scripts are needed; nothing is downloaded) and ``--reference-python`` a Python with the
reference's own dependencies (doy, tensordict, funcy, omegaconf, wandb, gym, rich; never
ssilbench's environment). This script runs in ssilbench's environment. It

1. writes a chunk set in the paper's Procgen layout (``chunks.py``: a moving square whose
   expert's actions can be learned) under WORK/src;
2. runs the reference's five scripts (``train_lapo_stage1.py``, ``train_lapo_stage2.py``,
   ``train_lapo_stage3.py``, ``train_lapo_plus_stage2.py``, ``train_lapo_plus_stage3.py``)
   from its checkout with its ``config.yaml`` (``run_reference.py`` says what a short run
   changes), in WORK/reference;
3. at the same time runs ``ssilbench data import procgen`` and ``ssilbench run --method
   lapo,lapo_plus --env procgen:GAME --no-rollouts`` in WORK/ssilbench;
4. fits the reference's latent-action probe (its ``train_decoder``: an MLP (128, 128) on the
   IDM's latents of the train data's first half, AdamW, 3 epochs, batch 128; accuracy on the
   second half) to both stage-1 models' latents with the same code and seed;
5. prints the table, and writes it to WORK/comparison.json.

Both sides train the same networks (``size=small`` is the reference's ``wm_scale=8``,
``idm_impala_scale=1``, ``policy_impala_scale=1``), with the same batch, learning rates and
schedules, stage lengths, label budget and seed number; they do not share random streams
(initial weights, minibatch order, the labeled subset), so the numbers agree as two seeds of
one algorithm agree, not digit for digit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from chunks import write_dataset  # noqa: E402

NUM_ACTIONS = 15  # Procgen's; the reference's probe hard-codes it too


def probe_accuracy(latents: np.ndarray, actions: np.ndarray, seed: int = 0) -> float:
    """The reference's latent-action probe (``utils.train_decoder``), reimplemented: an MLP
    (128, 128) from the latent to the action, AdamW with its defaults, 3 epochs of batch 128
    on the first half of the rows; accuracy on the second half."""
    torch.manual_seed(seed)
    x, y = torch.as_tensor(latents, dtype=torch.float32), torch.as_tensor(actions).long()
    half = len(x) // 2
    net = nn.Sequential(nn.Linear(x.shape[1], 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                        nn.Linear(128, NUM_ACTIONS))  # fmt: skip
    opt = torch.optim.AdamW(net.parameters())
    for _ in range(3):
        for rows in torch.randperm(half).split(128):
            loss = F.cross_entropy(net(x[rows]), y[rows])
            opt.zero_grad()
            loss.backward()
            opt.step()
    with torch.no_grad():
        return float((net(x[half:]).argmax(-1) == y[half:]).float().mean())


def transition_actions(chunk: Path) -> np.ndarray:
    """The action of every transition ssilbench keeps from one chunk (frames t -> t+1 within
    an episode), in its order."""
    with np.load(chunk) as data:
        ta, done = data["ta"], data["done"]
    return ta[:-1][~done[:-1]]


def run(cmd: list[str], log: Path, cwd: Path | None = None, env=None) -> subprocess.Popen:
    handle = log.open("w")
    return subprocess.Popen(cmd, cwd=cwd, stdout=handle, stderr=subprocess.STDOUT, env=env)


def wait(proc: subprocess.Popen, log: Path) -> None:
    if proc.wait() != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"{' '.join(map(str, proc.args))} failed (log {log}):\n{tail}")


def reference_side(args, src: Path, work: Path, steps: dict) -> dict:
    lapo = args.reference / "lapo" if (args.reference / "lapo").is_dir() else args.reference
    if not (lapo / "train_lapo_plus_stage2.py").exists():
        raise SystemExit(f"{args.reference}: no train_lapo_plus_stage2.py there; give an "
                         "extracted checkout of sachaMorin/lapo-plus")  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    shutil.copy(lapo / "config.yaml", work / "config.yaml")
    link = work / "expert_data"
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(src.resolve())
    shutil.rmtree(work / "exp_results", ignore_errors=True)
    common = [
        f"env_name={args.game}", "exp_name=compare", f"seed={args.seed}",
        f"test_every={steps['short']}", "model.wm_scale=8", "model.idm_impala_scale=1",
        "model.policy_impala_scale=1",
        f"lapo_stage1.steps={steps['world_model']}", f"lapo_stage1.bs={args.batch}",
        f"lapo_stage2.steps={steps['long']}", f"lapo_stage2.bs={args.batch}",
        f"lapo_stage3.steps={steps['short']}", f"lapo_stage3.bs={args.batch}",
        f"lapo_stage3.n_observed_samples={args.budget}",
        f"lapo_plus_stage2.steps={steps['short']}", f"lapo_plus_stage2.bs={args.batch}",
        f"lapo_plus_stage2.n_observed_samples={args.budget}",
        f"lapo_plus_stage3.steps={steps['long']}", f"lapo_plus_stage3.bs={args.batch}",
    ]  # fmt: skip
    out = {}
    scripts = ["train_lapo_stage1.py", "train_lapo_stage2.py", "train_lapo_stage3.py",
               "train_lapo_plus_stage2.py", "train_lapo_plus_stage3.py"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for script in scripts:
        name = script.removeprefix("train_").removesuffix(".py")
        cmd = [args.reference_python, str(HERE / "run_reference.py"), "--lapo", str(lapo),
               "--script", script, "--train-chunk", str(args.train_frames),
               "--test-chunk", str(args.test_frames), "--warmup", str(args.warmup),
               "--out", str(work / f"{name}.json")]  # fmt: skip
        if script == "train_lapo_stage2.py":
            cmd += ["--dump-latents", str(work / "latents.npz")]
        started = time.time()
        log = work / f"{name}.log"
        wait(run([*cmd, "--", *common], log, cwd=work, env=env), log)
        print(f"reference {script}: {time.time() - started:.0f} s", flush=True)
        out[name] = json.loads((work / f"{name}.json").read_text())
    return out


def ssilbench_side(args, src: Path, work: Path) -> subprocess.Popen:
    """Import, then both methods, as one shell pipeline in the background."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    cli = [sys.executable, "-m", "ssilbench"]
    data, results = work / "data", work / "results"
    run_cmd = cli + [
        "run", "--method", "lapo,lapo_plus", "--env", f"procgen:{args.game}",
        "--budgets", str(args.budget), "--seeds", str(args.seed), "--steps", str(args.steps),
        "--no-rollouts", "--eval-every", str(10 * args.steps), "--threads", "1", "-q",
        "--results", str(results), "--data-root", str(data),
        "-c", "size=small", "-c", f"batch_size={args.batch}",
        "-c", f"world_model_batch={args.batch}", "-c", f"warmup_steps={args.warmup}",
        # stage 1 from the run's seed, as the reference's stage 1 takes its ``seed``
        # (ssilbench's default, world_model_seed=0, shares one stage 1 across seeds)
        "-c", f"world_model_seed={args.seed}",
    ]  # fmt: skip
    import_cmd = cli + ["data", "import", "procgen", "--from", str(src), "--data-root", str(data)]
    script = " && ".join(" ".join(map(str, c)) for c in (import_cmd, run_cmd))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return run(["bash", "-c", script], work / "ssilbench.log", env=env)


def ssilbench_results(work: Path, n_transitions: int) -> tuple[dict, np.ndarray]:
    db = sqlite3.connect(work / "results" / "results.sqlite")
    query = db.execute("SELECT method, metrics, stages FROM runs")
    runs = {m: (json.loads(metrics), json.loads(stages)) for m, metrics, stages in query}
    db.close()
    # D_U's latents, as the stage cache keeps them (the file of n_transitions rows of 128)
    found = []
    for meta in (work / "results" / "cache").glob("*/*.meta.json"):
        if json.loads(meta.read_text()).get("stage") == f"outputs of {n_transitions} rows":
            rows = np.load(meta.with_name(meta.name.replace(".meta.json", ".rows.npy")))
            if rows.shape == (n_transitions, 128):
                found.append(rows)
    if len(found) != 1:
        raise SystemExit(f"expected one cache file of D_U's latents, found {len(found)}")
    return runs, found[0]


def last(logged: dict, key: str) -> float:
    return logged["logged"][key]["value"][-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True,
                        help="extracted checkout of sachaMorin/lapo-plus")  # fmt: skip
    parser.add_argument("--reference-python", required=True,
                        help="a Python with the reference's dependencies")  # fmt: skip
    parser.add_argument("--work", type=Path, default=Path("/tmp/lapo_compare"))
    parser.add_argument("--game", default="starpilot")
    parser.add_argument("--train-frames", type=int, default=2048)
    parser.add_argument("--test-frames", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=480, help="total steps, split 50/60/10")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget", type=int, default=512, help="labeled transitions N_L")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up of the later stages")
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    if args.steps % 12:
        raise SystemExit("--steps must be a multiple of 12 (the stages split 50/60/10 of 120)")
    # ssilbench's split of --steps, which the reference's scripts are given stage by stage
    steps = {"world_model": args.steps * 5 // 12, "long": args.steps // 2,
             "short": args.steps // 12}  # fmt: skip
    if args.warmup >= steps["short"]:
        raise SystemExit("--warmup must be shorter than the shortest stage (steps / 12)")

    started = time.time()
    src = write_dataset(args.work / "src", args.game, args.train_frames, args.test_frames)
    ours = ssilbench_side(args, src, args.work / "ssilbench")
    theirs = reference_side(args, src, args.work / "reference", steps)
    wait(ours, args.work / "ssilbench" / "ssilbench.log")
    print(f"both done: {time.time() - started:.0f} s", flush=True)

    actions = transition_actions(src / args.game / "train" / "0.npz")
    runs, our_latents = ssilbench_results(args.work / "ssilbench", len(actions))
    ref_latents = np.load(args.work / "reference" / "latents.npz")
    lapo, plus = runs["lapo"][0], runs["lapo_plus"][0]
    rows = [
        ("stage-1 latent probe, the reference's own (its stage 2's check)",
         theirs["lapo_stage2"]["probe"]["test_acc"], None),
        ("stage-1 latent probe, one probe code for both",
         probe_accuracy(ref_latents["la"], ref_latents["ta"]),
         probe_accuracy(our_latents, actions)),
        ("lapo policy phi(pi~(s)), test accuracy",
         last(theirs["lapo_stage3"], "test_acc_expert"), lapo["test_accuracy"]),
        ("lapo_plus IDM phi(h~(s, s')), test accuracy",
         last(theirs["lapo_plus_stage2"], "test_acc_expert"), plus["idm_accuracy"]),
        ("lapo_plus policy pi^(s), test accuracy",
         last(theirs["lapo_plus_stage3"], "test_acc_expert"), plus["test_accuracy"]),
        ("stage-1 forward-model loss, last step",
         last(theirs["lapo_stage1"], "wm_loss"), None),
    ]  # fmt: skip
    print(f"\n{args.game}: {args.train_frames} train / {args.test_frames} test frames, steps "
          f"{steps['world_model']} / {steps['long']} / {steps['short']}, batch {args.batch}, "
          f"N_L {args.budget}, seed {args.seed}\n")  # fmt: skip
    print("| | reference | ssilbench |\n|---|---|---|")
    for name, ref, our in rows:
        print(f"| {name} | {ref:.3f} | {'' if our is None else f'{our:.3f}'} |")
    report = {"args": {k: str(v) for k, v in vars(args).items()}, "steps": steps, "rows": rows,
              "ssilbench_stages": {m: s for m, (_, s) in runs.items()}}  # fmt: skip
    (args.work / "comparison.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
