"""The 1L CNN's stacked fast path (distinct patches) against the convolution it replaces."""

from __future__ import annotations

import pytest
import torch

from ssilbench.api import Stage, StagePlan, StoppingRule
from ssilbench.kit import as_model_input, fit_classifier, fit_classifiers, pair
from ssilbench.testing import Stacked, check_stacked_paths, load_plugins
from ssilbench_baselines.architectures import CNN1
from ssilbench_baselines.conv_max import distinct_patch_ids


def _image_maze(size: str):
    """A maze task with image states, from the registry (the maze plugin's own business)."""
    maze = load_plugins().environments.create("maze")
    return maze.load(size, maze.Options(state="image"))


def _maze_pairs(size: str = "10x10") -> tuple[torch.Tensor, torch.Tensor]:
    task = _image_maze(size)
    test = task.test_set()
    x = pair(as_model_input(test.obs), as_model_input(test.next_obs)).double()
    return x, torch.as_tensor(test.actions, dtype=torch.long)


def _nets(count: int, channels: int) -> list[torch.nn.Module]:
    nets = []
    for r in range(count):
        torch.manual_seed(r)
        nets.append(CNN1().build((channels, 11, 11), 4).double())
    return nets


def test_patch_ids_reproduce_every_image_maximum():
    x, _ = _maze_pairs()
    rows, table = distinct_patch_ids([x[:30], x[10:]], kernel=3)
    net = _nets(1, 6)[0]
    conv = net[0]
    for inputs, ids in zip([x[:30], x[10:]], rows, strict=True):
        values = table @ conv.weight.flatten(1).T + conv.bias  # (U, 4)
        assert torch.allclose(values[ids].amax(1), net(inputs), atol=1e-12)
    # A maze image holds far fewer distinct patches than positions (the point of the table).
    assert rows[0].shape[1] < 81 and len(table) < 0.25 * len(x) * 81


def test_images_that_share_a_digest_are_compared_exactly(monkeypatch):
    """Images are keyed by a digest: the images two runs share get one id (the runs' data
    overlap, so their equal images meet the exact comparison), and two different images
    whose digests collide (forced here) leave the data to the convolution."""
    import hashlib

    import ssilbench_baselines.conv_max as conv_max

    x, _ = _maze_pairs()
    [first, second], table = distinct_patch_ids([x[:30], x[10:]], kernel=3)
    assert torch.equal(first[10:], second[:20])  # images 10..29 of both runs: the same ids
    a, b = (x[i].contiguous().numpy().tobytes() for i in (0, 1))
    assert a != b

    # Image 1's digest is image 0's: without the exact comparison, image 1 would take image
    # 0's patch ids.
    def colliding(data: bytes, digest_size: int):
        return hashlib.md5(a if data == b else data)

    monkeypatch.setattr(conv_max.hashlib, "blake2b", colliding)
    assert distinct_patch_ids([x[:30], x[10:]], kernel=3) is None


def test_fast_path_declines_images_of_distinct_patches():
    noise = torch.rand(8, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    assert distinct_patch_ids([noise], kernel=3) is None


def test_stacked_fast_path_gives_the_vmap_outputs_and_gradients():
    x, y = _maze_pairs()
    nets = _nets(3, 6)
    inputs = [x[:20], x[5:40], x[30:]]
    rows, table = nets[0].stacked_encode(inputs, 8)
    fast, plain = Stacked(nets, table), Stacked(_nets(3, 6))
    batch = torch.stack([i[:8] for i in inputs])
    batch_rows = torch.stack([r[:8] for r in rows])
    target = torch.stack([y[:20][:8], y[5:40][:8], y[30:][:8]])
    check_stacked_paths(fast, plain, batch_rows, batch, target)


def test_stacked_cnn1_training_matches_runs_trained_alone():
    x, y = _maze_pairs()
    splits = [(0, 12), (0, 30), (10, 49)]
    rule = StoppingRule(check_every=25, abs_tol=1e-3, rel_tol=0.02)

    def budget(net):
        plan = StagePlan([Stage("fit", 150, policy=True)], 1000, evaluate=lambda policy: None)
        return plan.stage("fit", policy=net)

    alone = _nets(3, 6)
    alone_budgets = [budget(n) for n in alone]
    for r, ((a, b), net) in enumerate(zip(splits, alone, strict=True)):
        fit_classifier(net, x[a:b], y[a:b], alone_budgets[r], lr=1e-2, batch_size=8, seed=r,
                       rule=rule)  # fmt: skip
    stacked = _nets(3, 6)
    budgets = [budget(n) for n in stacked]
    fit_classifiers(
        stacked, [x[a:b] for a, b in splits], [y[a:b] for a, b in splits], budgets,
        lr=1e-2, batch_sizes=[8, 8, 8], seeds=[0, 1, 2], rule=rule,
    )  # fmt: skip
    assert [b.used for b in budgets] == [b.used for b in alone_budgets]
    for a, b in zip(alone, stacked, strict=True):
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
            assert pa.sub(pb).abs().max() < 1e-9


@pytest.mark.parametrize("size", ["20x20", "50x50"])
def test_patch_table_stays_small_on_large_mazes(size):
    task = _image_maze(size)
    obs = as_model_input(task.test_set().obs[:64])
    rows, table = distinct_patch_ids([obs], kernel=3)
    positions = (obs.shape[-1] - 2) * (obs.shape[-2] - 2)
    assert rows[0].shape[1] < positions / 3
    assert len(table) < 0.05 * len(obs) * positions
