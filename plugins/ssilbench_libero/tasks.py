"""The ten LIBERO-10 tasks, the observation layout and the evaluation protocols.

Plain data only: loading a task (listing, planning) must not import the simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

SUITE = "libero_10"
IMAGE_SIZE = 128
IMAGE_SHAPE = (IMAGE_SIZE, IMAGE_SIZE, 3)
ACTION_DIM = 7
ACTION_NAMES = ("dx", "dy", "dz", "droll", "dpitch", "dyaw", "gripper")
# Which action dimensions are what, for models that represent them otherwise (UVA turns the
# axis-angle into the 6-D rotation, as its reference does): the spec's
# metadata["action_layout"]. The rotation is robosuite's OSC_POSE delta axis-angle, in the
# controller's [-1, 1] input units.
ACTION_LAYOUT = {"position": [0, 1, 2], "axis_angle": [3, 4, 5], "gripper": [6]}
# How the OSC_POSE controller reads the arm's six numbers (the environment's -o control):
# "delta", LIBERO's own (moves in [-1, 1] input units, scaled by the controller to at most
# 5 cm and 0.5 rad a step), or "absolute", the UVA reference's (control_delta = False): the
# goal pose itself, position in metres in the world frame and orientation as an axis-angle
# in radians, both in the world frame. The layout of the seven numbers is the same.
CONTROLS = ("delta", "absolute")
ABSOLUTE_ACTION_NAMES = ("x", "y", "z", "rx", "ry", "rz", "gripper")
# Bounds of absolute actions: the axis-angle's angle is at most pi; the position box holds
# every goal a Panda mounted in a LIBERO-10 scene can reach, with room to spare: its reach is
# 0.855 m and its base stands at x -0.75 .. -0.51, y 0, z 0.42 .. 0.912 in the nine scenes
# (read from the installed LIBERO's robots). Outside values are clipped, as delta actions are
# to [-1, 1].
ABSOLUTE_ACTION_LOW = (-2.0, -2.0, -1.0, -np.pi, -np.pi, -np.pi, -1.0)
ABSOLUTE_ACTION_HIGH = (2.0, 2.0, 3.0, np.pi, np.pi, np.pi, 1.0)
# Proprioception as the demonstrations store it: obs/gripper_states (2 finger positions)
# then obs/joint_states (7 arm joint angles); in the simulator robot0_gripper_qpos and
# robot0_joint_pos.
PROPRIO_DIM = 9
PROPRIO_LAYOUT = ("gripper_states[0:2]", "joint_states[0:7]")
CAMERAS = {"obs": "agentview", "wrist": "robot0_eye_in_hand"}
# Zero actions LIBERO's own evaluation steps after placing a start state so that objects
# settle; they are not part of the episode (no observation, reward or step count).
SETTLE_STEPS = 5
# LIBERO ships 50 fixed start states per task.
NUM_INIT_STATES = 50


@dataclass(frozen=True)
class LiberoTask:
    """One LIBERO-10 task: our short id and LIBERO's own (bddl) name."""

    id: str
    bddl: str

    @property
    def scene(self) -> str:
        """``LIVING_ROOM_SCENE2`` for ``LIVING_ROOM_SCENE2_put_both_...``."""
        head, _, _ = self.bddl.partition("_SCENE")
        number = self.bddl[len(head) + len("_SCENE") :].split("_", 1)[0]
        return f"{head}_SCENE{number}"

    @property
    def language(self) -> str:
        """The language instruction: the bddl name after the scene, words spaced."""
        return self.bddl[len(self.scene) + 1 :].replace("_", " ")

    @property
    def demo_file(self) -> str:
        """The name of the task's file in the LIBERO-10 HDF5 download."""
        return f"{self.bddl}_demo.hdf5"


# In LIBERO's suite order (libero_suite_task_map["libero_10"], task order 0).
TASKS: tuple[LiberoTask, ...] = (
    LiberoTask("soup-sauce-basket",
               "LIVING_ROOM_SCENE2_put_both_the_alphabet_soup_and_the_tomato_sauce_in_the_basket"),
    LiberoTask("cheese-butter-basket",
               "LIVING_ROOM_SCENE2_put_both_the_cream_cheese_box_and_the_butter_in_the_basket"),
    LiberoTask("stove-moka-pot", "KITCHEN_SCENE3_turn_on_the_stove_and_put_the_moka_pot_on_it"),
    LiberoTask("bowl-drawer",
               "KITCHEN_SCENE4_put_the_black_bowl_in_the_bottom_drawer_of_the_cabinet_and_close_it"),
    LiberoTask("mugs-plates",
               "LIVING_ROOM_SCENE5_put_the_white_mug_on_the_left_plate_and_put_the_yellow_and_"
               "white_mug_on_the_right_plate"),
    LiberoTask("book-caddy",
               "STUDY_SCENE1_pick_up_the_book_and_place_it_in_the_back_compartment_of_the_caddy"),
    LiberoTask("mug-pudding",
               "LIVING_ROOM_SCENE6_put_the_white_mug_on_the_plate_and_put_the_chocolate_pudding_"
               "to_the_right_of_the_plate"),
    LiberoTask("soup-cheese-basket",
               "LIVING_ROOM_SCENE1_put_both_the_alphabet_soup_and_the_cream_cheese_box_in_the_"
               "basket"),
    LiberoTask("moka-pots-stove", "KITCHEN_SCENE8_put_both_moka_pots_on_the_stove"),
    LiberoTask("mug-microwave",
               "KITCHEN_SCENE6_put_the_yellow_and_white_mug_in_the_microwave_and_close_it"),
)  # fmt: skip
TASK_IDS: tuple[str, ...] = tuple(task.id for task in TASKS)
BY_ID = {task.id: task for task in TASKS}
BY_BDDL = {task.bddl: task for task in TASKS}


@dataclass(frozen=True)
class Protocol:
    """How evaluation episodes start and how long they may run."""

    name: str
    start: Literal["init_states", "seeded"]
    episodes: int
    max_steps: int
    description: str


PROTOCOLS: dict[str, Protocol] = {
    "official": Protocol(
        "official", "init_states", 20, 600,
        "LIBERO's: one episode from each of the task's first 20 fixed initial states, up to "
        "600 steps, score = success rate",
    ),
    "paper": Protocol(
        "paper", "init_states", 10, 600,
        "the paper's count: one episode from each of the task's first 10 fixed initial "
        "states (100 rollouts over the ten tasks), up to 600 steps, score = success rate",
    ),
    "uva": Protocol(
        "uva", "seeded", 3, 500,
        "UVA's: 3 episodes whose objects LIBERO places at random from per-episode seeds, up "
        "to 500 steps, score = success rate",
    ),
    "smoke": Protocol(
        "smoke", "init_states", 2, 20,
        "a smoke test for CI: 2 episodes from the first fixed initial states, 20 steps each "
        "(far too short to succeed)",
    ),
}  # fmt: skip
