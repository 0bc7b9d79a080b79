"""Where the 100-step stage-1 curves of ssilbench and the reference part: a diagnostic.

    SSILBENCH_LAPO_REFERENCE is not read; give the checkout as the first argument:
    OMP_NUM_THREADS=1 python benchmarks/lapo_reference/drift.py /tmp/lapo_ref

Runs, at the paper's size on the parity test's moving squares (100 SGD steps of batch 16,
rate 0.1, the same rows): A, the reference; B, the reference with one weight of its first
convolution moved by one ulp; C, ssilbench from the same weights (by the parity test's key
mapping). A and C are scheduled as the parity test scheduled them before the fix: the
reference over its 50,000-step stage (full rate after step 50), ssilbench over the 100-step
stage (decaying to 1% by step 100). Prints |B - A| / A and |C - A| / A every 5 steps.
What it printed is in docs/methods/lapo.md ("The drift, explained").
"""
# ruff: noqa: E402  (the repository root goes on sys.path before ssilbench is imported)

import copy
import importlib.util
import os
import sys
import time
import types

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2]))
import numpy as np
import torch
import yaml

torch.set_num_threads(1)
import tests.plugins.lapo.test_reference_parity as P
from ssilbench.kit import set_lr
from ssilbench_lapo.world_model import schedules


def load_ref(root):
    lapo = os.path.join(root, "lapo")
    import pathlib

    lapo = pathlib.Path(lapo)
    model_cfg = yaml.safe_load((lapo / "config.yaml").read_text())["model"]
    vq = P._VQConfig(**model_cfg["vq"])
    sys.modules.update(P._stand_ins(P._VQConfig))
    spec = importlib.util.spec_from_file_location("lapo_reference_models", lapo / "models.py")
    models = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(models)
    la_dim = vq.num_codebooks * vq.emb_dim * vq.num_discrete_latents
    return types.SimpleNamespace(models=models, vq=vq, la_dim=la_dim, model=model_cfg)


ref = load_ref(sys.argv[1] if len(sys.argv) > 1 else "/tmp/lapo_ref_plus")
STEPS = int(os.environ.get("STEPS", 100))
B = 16
N = 512
LR = 0.1
frames = P._moving_square(N, seed=0)
obs, nxt = frames[:-1], frames[1:]
g = torch.Generator().manual_seed(0)
rows_seen = [torch.randperm(N, generator=g)[:B] for _ in range(STEPS)]


def ref_run(idm, wm, tag):
    params = [*idm.parameters(), *wm.parameters()]
    opt = torch.optim.SGD(params, lr=LR)
    losses, codes = [], []
    for step, rows in enumerate(rows_seen):
        for gr in opt.param_groups:
            gr["lr"] = P._reference_lr(step, LR)
        batch, wl, vl = P._reference_step(idm, wm, obs[rows], nxt[rows])
        opt.zero_grad()
        (wl + vl).backward()
        torch.nn.utils.clip_grad_norm_(params, 2)
        opt.step()
        losses.append(float((wl + vl).detach()))
        codes.append(batch["la_qinds"].detach().clone())
    return np.array(losses), codes


cfg, idm, wm, ours = P._both(ref)
idm0, wm0 = copy.deepcopy(idm), copy.deepcopy(wm)
t = time.time()
A, cA = ref_run(copy.deepcopy(idm0), copy.deepcopy(wm0), "A")
print("A time", time.time() - t, flush=True)
np.save(os.environ.get("DRIFT_OUT", "/tmp") + "/drift_A.npy", A)
# 1-ulp perturbation of one weight of the IDM's first convolution
idmB = copy.deepcopy(idm0)
with torch.no_grad():
    w = idmB.conv_stack[0].conv.weight.view(-1)
    w[0] = torch.nextafter(w[0], torch.tensor(float("inf")))
B_, cB = ref_run(idmB, copy.deepcopy(wm0), "B")
np.save(os.environ.get("DRIFT_OUT", "/tmp") + "/drift_B.npy", B_)
print("B done", flush=True)
# ssilbench (SGD, same rows)
s, sn = obs.float() / 255, nxt.float() / 255
params = [p for p in ours.parameters() if p.requires_grad]
opt = torch.optim.SGD(params, lr=LR)
C = []
for step, rows in enumerate(rows_seen):
    set_lr(opt, LR, schedules(cfg)[0], step, STEPS)
    loss = ours.loss(s[rows], sn[rows])
    opt.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
    opt.step()
    C.append(float(loss))
C = np.array(C)
np.savez(os.environ.get("DRIFT_OUT", "/tmp") + "/drift_sgd.npz", A=A, B=B_, C=C)


def rel(x, y):
    return np.abs(x - y) / np.abs(y)


for i in list(range(0, STEPS, 5)) + [STEPS - 1]:
    codediff = int((cA[i] != cB[i]).sum())
    print(
        f"step {i:3d} A {A[i]:.6f}  |B-A|/A {rel(B_, A)[i]:.2e}  "
        f"|C-A|/A {rel(C, A)[i]:.2e}  codes A!=B {codediff}"
    )
w = STEPS // 5
print("curve A", [round(A[i : i + w].mean(), 5) for i in range(0, STEPS, w)])
print("curve B", [round(B_[i : i + w].mean(), 5) for i in range(0, STEPS, w)])
print("curve C", [round(C[i : i + w].mean(), 5) for i in range(0, STEPS, w)])
