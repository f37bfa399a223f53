"""The configuration of ObjNav-lite: a frozen dataclass whose fields are the env's kwargs."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

SHAPINGS = ("trial_potential", "episode_refund", "episode")
REWARD_OBS = ("full", "task")


@dataclass(frozen=True)
class ObjNavConfig:
    """Sizes, rewards and horizons of ObjNav-lite (defaults: the Memo paper's ExtObjNav shape)."""

    grid_size: int = 24
    """Side of the square map in cells, outer walls included."""
    rooms: int = 6
    """Number of rooms the map is split into (binary space partition); fewer if they do not fit."""
    min_room_size: int = 3
    """Smallest inner side of a room in cells."""
    extra_door_prob: float = 0.3
    """Chance that adjacent rooms get a door beyond those that connect the map (loops)."""
    num_categories: int = 20
    """K object categories (ExtObjNav: 20 YCB categories); the target is one of them."""
    instances_per_category: int = 1
    """Objects of each category placed in the map; success needs any one of them."""
    view_radius: int = 4
    """How far the agent sees, in cells; the view patch is view_radius x (2 view_radius + 1)."""
    view_half_angle: float = 45.0
    """Half-angle of the view cone in degrees (cells outside it read as unseen)."""
    target_channel: bool = False
    """Adds a view channel that marks the visible cells holding an instance of the current
    target (channels become [seen, wall, target, category 0..K-1]): a goal-conditioned view, as a
    target segmentation mask would give a camera-based agent (the CPU configs turn it on).
    Finding a target that is out of view still needs exploration or a memory of where its
    category was seen."""
    success_distance: float = 2.0
    """Reach: STOP succeeds if a target instance in view is this close (Euclidean, cells)."""
    success_reward: float = 2.0
    """Reward for a successful STOP."""
    step_cost: float = 0.003
    """Subtracted from the reward at every step."""
    distance_reward_scale: float = 0.25
    """Reward per cell of decrease in shortest-path distance (0.25: a cell is a 0.25 m step)."""
    shaping: str = "episode_refund"
    """How the distance reward runs over a trial. ``trial_potential``: one potential,
    -distance_reward_scale x (distance to the current target), across the whole trial; when an
    inner episode ends and the next one starts elsewhere with another target, the change of
    potential is paid too, so the distance rewards of a trial add up to its first start's
    distance minus its last one (bounded: nothing to farm). ``episode_refund``: the potential
    restarts with every inner episode, and a failed STOP pays back the distance reward its inner
    episode collected: walking closer and STOPping earns nothing, while a success keeps its
    distance reward and is never charged for the next start (agents learn far sooner with it;
    an episode cut by the step limit keeps its distance reward too, at most
    distance_reward_scale x the start distance per episode_len steps). ``episode``: the
    potential restarts with every inner episode (ExtObjNav's per-episode reward), which, inside
    long trials, pays an agent that walks a little closer and STOPs, again and again."""
    reward_obs: str = "full"
    """What the observation's ``prev_reward`` shows. ``full``: the previous step's reward.
    ``task``: only its task part, +success_reward for a success and -failed_stop_penalty for a
    failed STOP (0 otherwise): the distance term is a training signal, and shown to the policy it
    tells a memoryless agent at every step whether it moved closer to the target, a compass that
    makes the layout not worth remembering."""
    failed_stop_penalty: float = 0.1
    """Subtracted on a STOP that does not succeed."""
    failed_stop_ends: bool = True
    """Whether a STOP that does not succeed ends the inner episode (Habitat's rule). With false the
    agent stays where it is and the inner episode goes on until a success or the step limit: a
    failed STOP then cannot buy a new start and target (a memoryless agent learns to STOP at once
    on a start it cannot solve), and the distance reward, which runs on within the episode, has
    nothing to refund."""
    targets_per_trial: int | None = None
    """How many of the K categories a trial draws its inner episodes' targets from (drawn at the
    trial's start, per env). None: any category, each episode. 1: every inner episode of a trial
    seeks the same category, so after its first success an agent that remembers where it
    succeeded can walk straight back (the in-context pattern of Dark-Key-To-Door), while one that
    forgets has to search again; a curriculum step before recall of any category seen."""
    min_start_distance: int = 2
    """Shortest-path distance (cells) that a new inner episode's start keeps from its target."""
    episode_len: int = 500
    """Step limit of an inner episode (ExtObjNav: 500)."""
    trial_len: int = 4096
    """Steps of one trial in one layout = one RLlib episode (4096 training, 32000 evaluation)."""
    seed: int | None = None
    """Base seed of layouts and episodes; None draws one from the OS."""

    def __post_init__(self) -> None:
        ints = {
            "grid_size": 8,
            "rooms": 1,
            "min_room_size": 2,
            "num_categories": 1,
            "instances_per_category": 1,
            "view_radius": 1,
            "min_start_distance": 1,
            "episode_len": 1,
            "trial_len": 1,
        }
        for name, low in ints.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(
                    f"ObjNav {name} must be an int >= {low}, got {value!r}; fix env.config.{name}"
                )
        for name in ("target_channel", "failed_stop_ends"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"ObjNav {name} must be true or false, got {getattr(self, name)!r}; "
                    f"fix env.config.{name}"
                )
        tpt = self.targets_per_trial
        if tpt is not None and (
            not isinstance(tpt, int) or isinstance(tpt, bool) or not 1 <= tpt <= self.num_categories
        ):
            raise ValueError(
                f"ObjNav targets_per_trial must be null (any category) or an int in "
                f"[1, num_categories={self.num_categories}], got {tpt!r}; fix "
                "env.config.targets_per_trial"
            )
        if self.shaping not in SHAPINGS:
            raise ValueError(
                f"ObjNav shaping must be one of {list(SHAPINGS)}, got {self.shaping!r}"
            )
        if self.reward_obs not in REWARD_OBS:
            raise ValueError(
                f"ObjNav reward_obs must be one of {list(REWARD_OBS)}, got {self.reward_obs!r}"
            )
        if self.failed_stop_penalty < 0:
            raise ValueError(
                f"ObjNav failed_stop_penalty must be >= 0, got {self.failed_stop_penalty}"
            )
        if not 0.0 <= self.extra_door_prob <= 1.0:
            raise ValueError(
                f"ObjNav extra_door_prob must be in [0, 1], got {self.extra_door_prob}"
            )
        if not 0.0 < self.view_half_angle <= 90.0:
            raise ValueError(
                f"ObjNav view_half_angle must be in (0, 90] degrees, got {self.view_half_angle}"
            )
        if not 1.0 <= self.success_distance <= self.view_radius:
            raise ValueError(
                f"ObjNav success_distance must be in [1, view_radius={self.view_radius}] cells "
                f"(the target must be in view to count), got {self.success_distance}"
            )
        interior = (self.grid_size - 2) ** 2
        objects = self.num_categories * self.instances_per_category
        if objects > interior // 4:
            raise ValueError(
                f"ObjNav places {objects} objects (num_categories x instances_per_category) on a "
                f"{self.grid_size}x{self.grid_size} map; at most {interior // 4} fit. Raise "
                "grid_size or lower num_categories / instances_per_category."
            )
        if self.seed is not None and (not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"ObjNav seed must be None or an int >= 0, got {self.seed!r}")

    @classmethod
    def from_kwargs(cls, kwargs: dict[str, Any]) -> ObjNavConfig:
        """Builds a config from keyword arguments; unknown keys are errors that list the known."""
        allowed = [f.name for f in fields(cls)]
        unknown = sorted(set(kwargs) - set(allowed))
        if unknown:
            raise ValueError(f"Unknown ObjNav config keys {unknown}. Allowed: {allowed}")
        return cls(**kwargs)
