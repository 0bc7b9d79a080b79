"""``ssilbench eval``: a kept policy evaluated again and filmed (over
:mod:`ssilbench.runner.evaluate`)."""

from __future__ import annotations

from pathlib import Path

import click

from ssilbench.cli.app import State
from ssilbench.cli.options import count_option, device_option, results_option
from ssilbench.cli.outputs import guards_outputs

DEFAULT_VIDEO = "\0results/videos"  # --video given without DIR


@click.command("eval")
@click.argument("run_id")
@results_option
@count_option("--episodes", help="Episodes to play: the first N of the run's protocol "
              "[default: all of them, as the run's final evaluation].")  # fmt: skip
@click.option("--video", "video", default=None, is_flag=False, flag_value=DEFAULT_VIDEO,
              metavar="DIR", help="Film the first episode(s) into DIR as RUN_ID.mp4 (or .gif); "
              "--video alone: RESULTS/videos, where the HTML leaderboard links them.")  # fmt: skip
@count_option("--videos", default=1, help="Episodes to film (RUN_ID.mp4, RUN_ID-1.mp4, ...).")
@click.option("--format", "fmt", type=click.Choice(["auto", "mp4", "gif"]), default="auto",
              show_default=True, help="Video format; auto: MP4 where imageio-ffmpeg is "
              "installed (the [video] extra), else GIF.")  # fmt: skip
@device_option("cpu")
@click.pass_obj
@guards_outputs()
def eval_cmd(state: State, run_id: str, results: str, episodes: int | None, video: str | None,
             videos: int, fmt: str, device: str) -> None:  # fmt: skip
    """Evaluate the policy a run kept (run --keep-policy) under the run's protocol, seeds
    and final step, and film it with --video. RUN_ID: the run's id, or its first 6+
    characters."""
    from ssilbench.eval.video import VIDEOS
    from ssilbench.outputs import check_output
    from ssilbench.runner.evaluate import Filming, evaluate_kept

    results_dir = Path(results).expanduser()
    filming = None
    if video is not None:
        folder = results_dir / VIDEOS if video == DEFAULT_VIDEO else Path(video).expanduser()
        filming = Filming(check_output(folder, flag="--video"), videos, fmt)  # refused early
    report = evaluate_kept(state.plugins, results_dir, run_id, episodes, filming, device)
    for line in report.lines():
        click.echo(line)
