"""A lean PPO with the IMPALA-CNN to train Procgen experts (for ``ssilbench data collect``).

Defaults are the PPO settings of the Procgen paper (Cobbe et al. 2020): 64 environments,
256 steps per rollout, 3 epochs of 8 minibatches, Adam at 5e-4, gamma 0.999, GAE lambda
0.95, clip 0.2, entropy 0.01, value coefficient 0.5, gradient-norm clip 0.5, IMPALA scale 4
(use ``scale=1`` and fewer environments for small CPU runs).

The checkpoint is one file written atomically every ``checkpoint_every`` updates and at the
end; training with the same ``--out`` resumes from it. It records its architecture, so a
checkpoint of another architecture is refused by name rather than failing on shapes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ssilbench.api import UsageError
from ssilbench.kit import ImpalaTrunk, as_model_input, save_atomic
from ssilbench_procgen.expert_config import RESUMABLE, ExpertConfig
from ssilbench_procgen.games import NUM_ACTIONS, OBS_SHAPE

CHECKPOINT_FORMAT = "ssilbench_procgen.ppo-checkpoint"
CHECKPOINT_VERSION = 1
ARCHITECTURE = "impala-actor-critic"


PROGRESS_EVERY_ENV = "SSILBENCH_PROGRESS_EVERY"


def progress_every(default: float = 30.0) -> float:
    """Seconds between two progress lines (``SSILBENCH_PROGRESS_EVERY``, as for ``run``)."""
    import os

    try:
        value = float(os.environ.get(PROGRESS_EVERY_ENV, "") or default)
    except ValueError:
        return default
    return value if value > 0 else default


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def _count(n: int) -> str:
    """12_345 -> "12.3k", 25_000_000 -> "25M": counts in a narrow line."""
    for unit, size in (("M", 1_000_000), ("k", 1_000)):
        if n >= size:
            value = n / size
            return (f"{value:.1f}" if value < 100 else f"{value:.0f}").removesuffix(".0") + unit
    return str(n)


class ProgressLines:
    """Plain progress lines, at most one every ``every`` seconds (and whenever ``force``d):
    ``what: done/total (share), detail, rate/s, eta`` in at most 80 columns (the detail is
    shortened first); ``unit`` names what is counted (steps, frames), and ``done`` starts
    from ``start`` (a resumed run)."""

    def __init__(self, what: str, total: int, log: Callable[[str], None], unit: str = "steps",
                 start: int = 0, every: float | None = None) -> None:  # fmt: skip
        self.what, self.total, self.log, self.unit = what, total, log, unit
        self.every = progress_every() if every is None else every
        self.start, self.began = start, time.monotonic()
        self.next = self.began + self.every

    def __call__(
        self, done: int, detail: str | Callable[[], str] = "", force: bool = False
    ) -> None:
        """Report ``done`` (a line only when one is due); ``detail`` may be a callable, built
        only then."""
        now = time.monotonic()
        if not force and now < self.next:
            return
        detail = detail() if callable(detail) else detail
        self.next = now + self.every
        rate = (done - self.start) / max(now - self.began, 1e-9)
        eta = (self.total - done) / rate if rate > 0 else None
        share = 100 * done / self.total if self.total else 100.0
        head = f"{self.what}: {_count(done)}/{_count(self.total)} ({share:.0f}%)"
        tail = f", {rate:.0f}/s, eta {_clock(eta)}"
        room = 80 - len(head) - len(tail) - 2  # the detail is cut, the rate and eta never
        if detail and room > 3:
            head += ", " + (detail if len(detail) <= room else detail[: room - 2] + "..")
        self.log((head + tail)[:80])


class ActorCritic(nn.Module):
    """IMPALA-CNN trunk with a policy head (logits) and a value head."""

    def __init__(self, scale: int, num_actions: int = NUM_ACTIONS) -> None:
        super().__init__()
        self.trunk = ImpalaTrunk(OBS_SHAPE[0], scale=scale, out_features=256)
        self.policy = nn.Linear(256, num_actions)
        self.value = nn.Linear(256, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.trunk(x)
        return self.policy(features), self.value(features).squeeze(-1)


def architecture_record(scale: int) -> dict[str, Any]:
    return {"name": ARCHITECTURE, "scale": scale, "in_channels": OBS_SHAPE[0],
            "num_actions": NUM_ACTIONS}  # fmt: skip


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint's contents (tensors and plain values only), or a UsageError naming it."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"No checkpoint at {path}: train one with 'ssilbench expert train'.")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise UsageError(
            f"{path} is not a readable checkpoint ({type(exc).__name__}); expected a file "
            "written by 'ssilbench expert train'."
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise UsageError(
            f"{path} is not a Procgen expert checkpoint (no '{CHECKPOINT_FORMAT}' format "
            "record); expected a file written by 'ssilbench expert train procgen:GAME'."
        )
    if payload.get("format_version") != CHECKPOINT_VERSION:
        raise UsageError(
            f"{path} is a checkpoint of format version {payload.get('format_version')}; this "
            f"ssilbench reads version {CHECKPOINT_VERSION}. Train the expert again."
        )
    return payload


def load_expert(path: Path, env_id: str) -> tuple[ActorCritic, dict[str, Any]]:
    """The policy network of a checkpoint, after checking its architecture and game."""
    payload = read_checkpoint(path)
    arch = payload.get("architecture") or {}
    if arch.get("name") != ARCHITECTURE or arch != architecture_record(arch.get("scale", 0)):
        raise UsageError(
            f"Checkpoint {path} has the architecture {arch.get('name', 'unknown')!r} "
            f"({arch}); collecting needs {ARCHITECTURE!r} with {OBS_SHAPE[0]} input channels "
            f"and {NUM_ACTIONS} actions, as written by 'ssilbench expert train'."
        )
    if payload.get("env_id") != env_id:
        raise UsageError(
            f"Checkpoint {path} was trained on {payload.get('env_id')}, not {env_id}; collect "
            f"with an expert of {env_id}."
        )
    model = ActorCritic(arch["scale"])
    try:
        model.load_state_dict(payload["model"])
    except (RuntimeError, KeyError) as exc:
        raise UsageError(
            f"Checkpoint {path} claims {ARCHITECTURE!r} at scale {arch['scale']} but its "
            f"weights do not fit it ({str(exc).splitlines()[0]})."
        ) from None
    return model, payload


def _explained(config: ExpertConfig) -> dict[str, Any]:
    return {k: v for k, v in config.model_dump().items() if k not in RESUMABLE}


def train(
    make_env: Callable[[int, int], Any],
    env_id: str,
    config: ExpertConfig,
    out: Path,
    device: torch.device,
    log: Callable[[str], None] = print,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train (or resume) until ``config.steps`` environment steps; returns the last record.

    ``make_env(num_envs, seed)`` builds the vectorised environment.
    """
    out = Path(out)
    per_update = config.steps_per_update
    total_updates = max(1, -(-config.steps // per_update))
    torch.manual_seed(config.seed)
    model = ActorCritic(config.scale).to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=config.lr, eps=1e-5)
    start, history = (
        _resume(out, env_id, config, model, optimiser, log) if out.exists() else (0, [])
    )
    if start >= total_updates:
        log(f"{out} already has {start * per_update} steps (>= {config.steps}); nothing to do")
        return history[-1] if history else {}

    # A resumed run restarts its environments on fresh levels: procgen states are not saved.
    venv = make_env(config.num_envs, config.seed * 1_000_003 + start)
    generator = torch.Generator().manual_seed(config.seed * 7919 + start)
    obs, _ = venv.reset(seed=config.seed * 1_000_003 + start)
    episode_return = np.zeros(config.num_envs)
    finished: list[float] = []
    progress = ProgressLines(env_id, total_updates * per_update, log, start=start * per_update)

    def returns() -> str:
        recent = finished[-100:]
        return f"return {np.mean(recent):.2f}" if recent else "return ?"

    try:
        for update in range(start, total_updates):
            done = update * per_update

            def tick(t: int, done: int = done) -> None:
                progress(done + t * config.num_envs, lambda: "rollout, " + returns())

            batch = _rollout(model, venv, obs, config, device, generator, episode_return,
                             finished, tick)  # fmt: skip
            obs = batch.pop("next_obs")
            progress(done + per_update, "optimising, " + returns())
            stats = _optimise(model, optimiser, batch, config, device, generator)
            recent = finished[-100:]
            record = {
                "update": update + 1,
                "frames": (update + 1) * per_update,
                "mean_return": float(np.mean(recent)) if recent else float("nan"),
                "episodes": len(finished),
                **stats,
            }
            history.append(record)
            saving = (update + 1) % config.checkpoint_every == 0 or update + 1 == total_updates
            if saving:
                checkpoint = _checkpoint(env_id, config, model, optimiser, update + 1, history)
                save_atomic({**checkpoint, **(extra or {})}, out)
            # "ckpt": the checkpoint was saved with this update.
            progress(record["frames"], f"{returns()}, update {update + 1}/{total_updates}"
                     + (" ckpt" if saving else ""), force=True)  # fmt: skip
    finally:
        venv.close()
    return history[-1]


def _checkpoint(env_id: str, config: ExpertConfig, model: ActorCritic,
                optimiser: torch.optim.Optimizer, updates: int, history: list[dict[str, Any]],
                ) -> dict[str, Any]:  # fmt: skip
    """What a checkpoint holds after ``updates`` updates: all that :func:`_resume` needs to
    continue, and what ``read_checkpoint`` checks."""
    return {
        "format": CHECKPOINT_FORMAT,
        "format_version": CHECKPOINT_VERSION,
        "architecture": architecture_record(config.scale),
        "env_id": env_id,
        "config": config.model_dump(),
        "config_fixed": _explained(config),
        "updates": updates,
        "frames": updates * config.steps_per_update,
        "model": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "optimizer": optimiser.state_dict(),
        "torch_rng": torch.get_rng_state(),
        "history": history,
    }


def _resume(out: Path, env_id: str, config: ExpertConfig, model: ActorCritic,
            optimiser: torch.optim.Optimizer, log: Callable[[str], None],
            ) -> tuple[int, list[dict[str, Any]]]:  # fmt: skip
    """Load the checkpoint at ``out`` into ``model`` and ``optimiser`` and restore torch's
    random state; returns the updates done and their history. A checkpoint of another game
    or other settings is refused, naming what differs."""
    payload = read_checkpoint(out)
    saved = payload.get("config_fixed") or {}
    wanted = _explained(config)
    if payload.get("env_id") != env_id or saved != wanted:
        differ = ", ".join(
            f"{k}={saved.get(k)!r} there, {wanted.get(k)!r} now"
            for k in sorted(set(saved) | set(wanted))
            if saved.get(k) != wanted.get(k)
        )
        raise UsageError(
            f"{out} holds a run of {payload.get('env_id')} with other settings "
            f"({differ or 'environment ' + env_id + ' now'}); resume it with the same "
            "settings (-c KEY=VALUE) or choose another --out."
        )
    model.load_state_dict(payload["model"])
    optimiser.load_state_dict(payload["optimizer"])
    torch.set_rng_state(payload["torch_rng"])
    start = int(payload["updates"])
    log(f"resuming {out} at update {start} ({start * config.steps_per_update} steps)")
    return start, list(payload["history"])


def _rollout(model, venv, obs, config, device, generator, episode_return, finished,
             tick=None):  # fmt: skip
    """One rollout of ``num_steps`` steps of every environment; ``tick(t)`` after step t."""
    t, e = config.num_steps, config.num_envs
    frames = np.empty((t, e, *OBS_SHAPE), dtype=np.uint8)
    actions = torch.empty((t, e), dtype=torch.long)
    logps = torch.empty((t, e))
    values = torch.empty((t + 1, e))
    rewards = torch.empty((t, e))
    dones = torch.empty((t, e))
    model.eval()
    with torch.no_grad():
        for step in range(t):
            frames[step] = obs
            logits, value = model(as_model_input(obs, device))
            dist = torch.distributions.Categorical(logits=logits.cpu())
            action = torch.multinomial(dist.probs, 1, generator=generator).squeeze(-1)
            actions[step], logps[step], values[step] = action, dist.log_prob(action), value.cpu()
            obs, reward, terminated, truncated, _ = venv.step(action.numpy())
            done = np.asarray(terminated) | np.asarray(truncated)
            rewards[step] = torch.as_tensor(reward, dtype=torch.float32)
            dones[step] = torch.as_tensor(done, dtype=torch.float32)
            episode_return += reward
            finished.extend(episode_return[done].tolist())
            episode_return[done] = 0.0
            if tick is not None:
                tick(step + 1)
        values[t] = model(as_model_input(obs, device))[1].cpu()
    advantages = torch.zeros((t, e))
    running = torch.zeros(e)
    for step in reversed(range(t)):
        live = 1.0 - dones[step]
        delta = rewards[step] + config.gamma * values[step + 1] * live - values[step]
        running = delta + config.gamma * config.gae_lambda * live * running
        advantages[step] = running
    return {
        "frames": frames.reshape(t * e, *OBS_SHAPE),
        "actions": actions.flatten(),
        "logps": logps.flatten(),
        "advantages": advantages.flatten(),
        "returns": (advantages + values[:t]).flatten(),
        "next_obs": obs,
    }


def _optimise(model, optimiser, batch, config, device, generator) -> dict[str, float]:
    model.train()
    n = len(batch["actions"])
    losses = []
    for _ in range(config.epochs):
        order = torch.randperm(n, generator=generator)
        for rows in torch.tensor_split(order, config.minibatches):
            if len(rows) == 0:
                continue
            idx = rows.numpy()
            logits, value = model(as_model_input(batch["frames"][idx], device))
            dist = torch.distributions.Categorical(logits=logits)
            actions = batch["actions"][rows].to(device)
            adv = batch["advantages"][rows].to(device)
            adv = (adv - adv.mean()) / (adv.std(unbiased=False) + 1e-8)
            ratio = torch.exp(dist.log_prob(actions) - batch["logps"][rows].to(device))
            policy_loss = -torch.min(
                ratio * adv, ratio.clamp(1 - config.clip, 1 + config.clip) * adv
            ).mean()
            value_loss = 0.5 * (value - batch["returns"][rows].to(device)).pow(2).mean()
            entropy = dist.entropy().mean()
            loss = policy_loss + config.vf_coef * value_loss - config.ent_coef * entropy
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimiser.step()
            losses.append((policy_loss.item(), value_loss.item(), entropy.item()))
    p, v, h = np.mean(losses, axis=0)
    return {"policy_loss": float(p), "value_loss": float(v), "entropy": float(h)}
