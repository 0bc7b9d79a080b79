"""How UVA represents actions inside the model, and the way back to the environment's.

``native``: the environment's actions, scaled from its bounds to [-1, 1] per dimension
(ssilbench's representation before the reference's LIBERO setup).

``rotation_6d``: the reference's LIBERO-10 representation (``rotation_rep: rotation_6d`` in its
``config/task/libero10.yaml``). The three action dimensions an environment declares as an
axis-angle (``EnvSpec.metadata["action_layout"]["axis_angle"]``) become the first two rows of
their rotation matrix (6 numbers, in their place), which has no jump at rotations of pi. The
normaliser is the reference's ``robomimic_abs_action_only_normalizer_from_stat``: the declared
``position`` dimensions are mapped from their range over D_L's actions to [-1, 1]; the 6-D
rotation is left as it is (already in [-1, 1]); any other dimension (LIBERO's gripper) is scaled
from the environment's bounds, which for bounds of [-1, 1] is the identity, as in the reference.
Sampled actions go back through Gram-Schmidt (the nearest rotation of the two rows), then to an
axis-angle, and are clipped to the environment's bounds; the environment steps its own actions.

The rotation conversions are computed in float64 (through a unit quaternion, so that angles near
0 and near pi are both exact) and returned in the input's dtype.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from ssilbench.api import ConfigError, EnvSpec

ActionRepresentation = Literal["native", "rotation_6d"]

# The reference's range normaliser leaves a dimension whose range is below this unscaled
# (``get_range_normalizer_from_stat``, range_eps).
RANGE_EPS = 1e-7


# --- rotations ---------------------------------------------------------------------------------
def _quaternion_to_matrix(q: torch.Tensor) -> torch.Tensor:
    """Unit quaternions (..., 4) as (w, x, y, z) -> rotation matrices (..., 3, 3)."""
    w, x, y, z = q.unbind(-1)
    rows = (
        (1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)),
        (2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)),
        (2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)),
    )
    return torch.stack([torch.stack(r, -1) for r in rows], -2)


def _matrix_to_quaternion(m: torch.Tensor) -> torch.Tensor:
    """Rotation matrices (..., 3, 3) -> unit quaternions (..., 4), w >= 0.

    Of the four ways to read a quaternion off a matrix, each row uses the one whose
    component is largest (at least 1/2), so no division is by a small number: this keeps
    rotations near pi (w near 0) as exact as those near 0."""
    r = m.unbind(-2)
    m00, m01, m02 = r[0].unbind(-1)
    m10, m11, m12 = r[1].unbind(-1)
    m20, m21, m22 = r[2].unbind(-1)
    squares = torch.stack(
        [1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1
    )
    big = 0.5 * squares.clamp_min(0).sqrt()  # (..., 4): |w|, |x|, |y|, |z| read directly
    d = 4 * big.clamp_min(1e-12)
    candidates = torch.stack(
        [
            torch.stack([big[..., 0], (m21 - m12) / d[..., 0], (m02 - m20) / d[..., 0],
                         (m10 - m01) / d[..., 0]], -1),
            torch.stack([(m21 - m12) / d[..., 1], big[..., 1], (m01 + m10) / d[..., 1],
                         (m02 + m20) / d[..., 1]], -1),
            torch.stack([(m02 - m20) / d[..., 2], (m01 + m10) / d[..., 2], big[..., 2],
                         (m12 + m21) / d[..., 2]], -1),
            torch.stack([(m10 - m01) / d[..., 3], (m02 + m20) / d[..., 3], (m12 + m21) / d[..., 3],
                         big[..., 3]], -1),
        ],
        -2,
    )  # fmt: skip
    choice = squares.argmax(-1)[..., None, None].expand(*squares.shape[:-1], 1, 4)
    q = candidates.gather(-2, choice).squeeze(-2)
    q = q / q.norm(dim=-1, keepdim=True)
    return torch.where(q[..., :1] < 0, -q, q)  # the same rotation, angle in [0, pi]


def axis_angle_to_matrix(r: torch.Tensor) -> torch.Tensor:
    """Axis-angle vectors (..., 3) (axis times angle in radians) -> matrices (..., 3, 3)."""
    x = r.to(torch.float64)
    angle = x.norm(dim=-1, keepdim=True)
    half = angle / 2
    small = angle < 1e-6
    # sin(angle / 2) / angle, by its Taylor series where the division is inexact.
    k = torch.where(small, 0.5 - angle * angle / 48, half.sin() / angle.where(~small, 1.0))
    q = torch.cat([half.cos(), x * k], -1)
    return _quaternion_to_matrix(q).to(r.dtype)


def matrix_to_axis_angle(m: torch.Tensor) -> torch.Tensor:
    """Rotation matrices (..., 3, 3) -> axis-angle vectors (..., 3), angle in [0, pi]."""
    q = _matrix_to_quaternion(m.to(torch.float64))
    v = q[..., 1:]
    s = v.norm(dim=-1, keepdim=True)  # sin(angle / 2)
    angle = 2 * torch.atan2(s, q[..., :1])
    small = s < 1e-6
    # angle / sin(angle / 2), by its Taylor series where the division is inexact.
    k = torch.where(small, 2 + angle * angle / 12, angle / s.where(~small, 1.0))
    return (v * k).to(m.dtype)


def matrix_to_rotation_6d(m: torch.Tensor) -> torch.Tensor:
    """Rotation matrices (..., 3, 3) -> their first two rows (..., 6)."""
    return m[..., :2, :].reshape(*m.shape[:-2], 6)


def rotation_6d_to_matrix(d6: torch.Tensor) -> torch.Tensor:
    """Two rows (..., 6), not necessarily orthonormal -> the rotation matrix Gram-Schmidt makes
    of them (..., 3, 3): the first row's direction, the second's part orthogonal to it, and
    their cross product."""
    x = d6.to(torch.float64)
    a1, a2 = x[..., :3], x[..., 3:]
    b1 = a1 / a1.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    b2 = a2 - (b1 * a2).sum(-1, keepdim=True) * b1
    b2 = b2 / b2.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    b3 = torch.cross(b1, b2, dim=-1)
    return torch.stack([b1, b2, b3], -2).to(d6.dtype)


def axis_angle_to_rotation_6d(r: torch.Tensor) -> torch.Tensor:
    """Axis-angle (..., 3) -> rotation_6d (..., 6)."""
    return matrix_to_rotation_6d(axis_angle_to_matrix(r.to(torch.float64))).to(r.dtype)


def rotation_6d_to_axis_angle(d6: torch.Tensor) -> torch.Tensor:
    """rotation_6d (..., 6) -> axis-angle (..., 3), angle in [0, pi]."""
    return matrix_to_axis_angle(rotation_6d_to_matrix(d6.to(torch.float64))).to(d6.dtype)


# --- the environment's declaration -------------------------------------------------------------
def declared_layout(spec: EnvSpec) -> dict[str, tuple[int, ...]]:
    """The action layout a task declares (``metadata["action_layout"]``: lists of action
    dimensions named ``position``, ``axis_angle``, ...), checked; {} when it declares none."""
    declared = spec.metadata.get("action_layout")
    if declared is None:
        return {}
    if not isinstance(declared, dict):
        raise ConfigError(f"uva: {spec.env_id}'s metadata['action_layout'] is not a mapping.")
    out: dict[str, tuple[int, ...]] = {}
    for name, dims in declared.items():
        if isinstance(dims, str) or not all(isinstance(d, int) for d in dims):
            raise ConfigError(
                f"uva: {spec.env_id}'s metadata['action_layout'][{name!r}] must list action "
                f"dimensions (integers), not {dims!r}."
            )
        bad = [d for d in dims if not 0 <= d < spec.num_actions]
        if bad:
            raise ConfigError(
                f"uva: {spec.env_id}'s metadata['action_layout'][{name!r}] names dimensions "
                f"{bad}, but its actions have {spec.num_actions}."
            )
        out[str(name)] = tuple(dims)
    rotation = out.get("axis_angle")
    if rotation is not None and (len(rotation) != 3 or list(rotation) != list(
        range(rotation[0], rotation[0] + 3)
    )):  # fmt: skip
        raise ConfigError(
            f"uva: {spec.env_id} declares the axis-angle action dimensions {list(rotation)}; "
            "they must be three consecutive dimensions."
        )
    return out


def model_action_dim(spec: EnvSpec, representation: ActionRepresentation) -> int:
    """Numbers per action inside the model."""
    return spec.num_actions + (3 if representation == "rotation_6d" else 0)


def check_representation(spec: EnvSpec, representation: ActionRepresentation) -> None:
    """``rotation_6d`` needs a declared axis-angle; one clear message otherwise."""
    if representation == "rotation_6d" and "axis_angle" not in declared_layout(spec):
        raise ConfigError(
            f"uva: actions=rotation_6d turns an axis-angle into the 6-D rotation, but "
            f"{spec.env_id} declares no axis-angle action dimensions "
            "(metadata['action_layout']['axis_angle']); use arch_options actions=native."
        )


# --- the codec ---------------------------------------------------------------------------------
class ActionCodec:
    """Environment actions (..., A) <-> model units (..., M), on one device.

    ``labeled_actions`` (D_L's actions, (N, A)) give the position ranges of ``rotation_6d``;
    ``native`` uses the environment's bounds only."""

    def __init__(
        self,
        spec: EnvSpec,
        representation: ActionRepresentation,
        labeled_actions: np.ndarray | None,
        device: torch.device | str,
    ) -> None:
        check_representation(spec, representation)
        self.representation = representation
        self.dim = model_action_dim(spec, representation)
        self.low = torch.tensor(spec.action_low, dtype=torch.float32, device=device)
        self.high = torch.tensor(spec.action_high, dtype=torch.float32, device=device)
        if representation == "native":
            return
        layout = declared_layout(spec)
        self.rotation = layout["axis_angle"][0]
        # Scale and offset per model dimension: y = x * scale + offset.
        a = spec.num_actions
        scale = (2 / (self.high - self.low)).double()
        offset = (-1 - self.low.double() * scale).double()
        position = list(layout.get("position", ()))
        if position:
            values = (np.asarray(labeled_actions, dtype=np.float64).reshape(-1, a)[:, position]
                      if labeled_actions is not None else np.zeros((0, len(position))))  # fmt: skip
            if len(values):
                lo, hi = values.min(0), values.max(0)
                span = hi - lo
                flat = span < RANGE_EPS
                pscale = np.where(flat, 1.0, 2 / np.where(flat, 1.0, span))
                poffset = np.where(flat, -lo, -1 - pscale * lo)
                scale[position] = torch.tensor(pscale, dtype=torch.float64, device=device)
                offset[position] = torch.tensor(poffset, dtype=torch.float64, device=device)
        r = self.rotation
        # The rotation's 6 numbers are used as they are.
        ones = torch.ones(6, dtype=torch.float64, device=device)
        self.scale = torch.cat([scale[:r], ones, scale[r + 3 :]])
        self.offset = torch.cat([offset[:r], ones * 0, offset[r + 3 :]])

    def state(self) -> dict[str, list[float]]:
        """What the encoding depends on beyond the spec (for logs and tests)."""
        if self.representation == "native":
            return {}
        return {"scale": self.scale.tolist(), "offset": self.offset.tolist()}

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """Environment actions (..., A) -> model units (..., M), float32."""
        if self.representation == "native":
            return 2 * (actions - self.low) / (self.high - self.low) - 1
        x = actions.to(torch.float64)
        r = self.rotation
        six = axis_angle_to_rotation_6d(x[..., r : r + 3])
        x = torch.cat([x[..., :r], six, x[..., r + 3 :]], -1)
        return (x * self.scale + self.offset).float()

    def decode(self, model: torch.Tensor) -> torch.Tensor:
        """Model units (..., M), clamped to [-1, 1] -> environment actions (..., A) within
        the environment's bounds, float32."""
        model = model.clamp(-1, 1)
        if self.representation == "native":
            return self.low + (model + 1) / 2 * (self.high - self.low)
        y = (model.to(torch.float64) - self.offset) / self.scale
        r = self.rotation
        axis_angle = rotation_6d_to_axis_angle(y[..., r : r + 6])
        x = torch.cat([y[..., :r], axis_angle, y[..., r + 6 :]], -1).float()
        return torch.minimum(torch.maximum(x, self.low), self.high)
