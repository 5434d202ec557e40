"""EnvState / EnvParams of HackMatrix (layout documented in specs/hackmatrix.md)."""
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class EnvState:
    time: jnp.ndarray            # int32 env steps taken this episode (truncation, D6)
    # --- player (R15) ---
    player_pos: jnp.ndarray      # int32 cell index 6*row+col
    hp: jnp.ndarray
    credits: jnp.ndarray
    energy: jnp.ndarray
    siphons: jnp.ndarray
    score: jnp.ndarray
    attack: jnp.ndarray
    owned: jnp.ndarray           # bool[23]
    played: jnp.ndarray          # bool[23] programs played this game: bookkeeping for the programPlayed shaping
                                 # term (not a rule, not observed, not in UNDO's snapshots, so UNDO cannot re-arm it)
    played_unpaid: jnp.ndarray   # int32 programs first played since the last stage completion, their programPlayed
                                 # not yet paid (EnvParams.program_played_at_clear; bookkeeping like ``played``)
    acquired_unpaid: jnp.ndarray # int32 change in the number of programs owned since the last stage completion,
                                 # its programAcquired not yet paid (EnvParams.program_acquired_at_clear; the same)
    # --- globals (R27) ---
    stage: jnp.ndarray
    start_stage: jnp.ndarray     # int32 stage this game began on: 1 by the rules; later for a curriculum start,
                                 # whose R110 death penalty then counts only the stages cleared in this game
    turn: jnp.ndarray
    sched_interval: jnp.ndarray
    next_sched_turn: jnp.ndarray
    pending_siphon: jnp.ndarray
    atk_plus_uses: jnp.ndarray
    history: jnp.ndarray         # int32[HISTORY_CAP, SNAP_SIZE] UNDO snapshots, a ring (history.py, D7)
    history_len: jnp.ndarray     # int32 snapshots on the stack (0..HISTORY_CAP)
    history_top: jnp.ndarray     # int32 ring slot the next snapshot goes to
    show_activated: jnp.ndarray  # bool
    sched_disabled: jnp.ndarray  # bool
    step_active: jnp.ndarray     # bool
    exit_pos: jnp.ndarray        # int32 cell index (R13)
    # --- grid, flat [36] (R8, R9) ---
    content: jnp.ndarray         # int32 EMPTY/BLOCK/DATA_SIPHON/EXIT
    blk_data: jnp.ndarray        # bool payload is data (else program); also for question blocks
    blk_question: jnp.ndarray    # bool unrevealed question block
    blk_points: jnp.ndarray      # int32
    blk_program: jnp.ndarray     # int32 0..22
    blk_spawn: jnp.ndarray       # int32 spawnCount
    res_credits: jnp.ndarray     # int32 credits stack on the cell
    res_energy: jnp.ndarray      # int32 energy stack on the cell
    siphoned: jnp.ndarray        # bool
    siphon_center: jnp.ndarray   # bool
    # --- entities: enemies and transmissions in one slot array [MAX_ENTITIES] ---
    ent_active: jnp.ndarray      # bool
    ent_enemy: jnp.ndarray       # bool: True = enemy, False = transmission
    ent_type: jnp.ndarray        # int32 enemy type (hidden type for transmissions)
    ent_pos: jnp.ndarray         # int32 cell
    ent_hp: jnp.ndarray          # int32 (enemies)
    ent_turns: jnp.ndarray       # int32 turnsRemaining (transmissions)
    ent_disabled: jnp.ndarray    # int32 disabledTurns (enemies)
    ent_stunned: jnp.ndarray     # bool
    ent_sched: jnp.ndarray       # bool isFromScheduledTask
    ent_siphon: jnp.ndarray      # bool spawnedFromSiphon
    ent_order: jnp.ndarray       # int32 list order key (D3)
    next_order: jnp.ndarray      # int32 next list order key


@struct.dataclass
class EnvParams:
    max_steps_in_episode: int = 1000     # D6: truncation after 1000 agent actions
    step_penalty: float = 0.01           # R103 (subtracted)
    stage_coef: float = 1.0              # R104 multiplier of T = [1,2,4,...,64,100]
    score_coef: float = 0.5              # R105
    kill_coef: float = 0.3               # R106
    pickup_reward: float = 1.0           # R107
    distance_coef: float = 0.05          # R108
    victory_bonus: float = 500.0         # R109
    victory_score_coef: float = 100.0    # R109
    death_coef: float = 0.5              # R110 (times sum of completed-stage rewards, subtracted)
    resource_gain_coef: float = 0.05     # R111
    resource_holding_coef: float = 0.01  # R112
    damage_coef: float = 1.0             # R113 (subtracted)
    hp_recovery_coef: float = 1.0        # R114
    program_waste: float = 0.3           # R115 (subtracted)
    siphon_death_penalty: float = 10.0   # R116 (subtracted)
    # D7/R94: Swift keeps the UNDO history across stages, so UNDO right after an exit restores the old
    # stage's grid and the exit can be walked onto again (stage farming). True = faithful.
    undo_across_stages: bool = True
    siphon_quality_coef: float = 0.025   # R117 = 0.5 * 0.05 per missed credit/energy (subtracted)
    # Training curriculum (not a rule): this share of new games starts on a stage uniform in
    # 2..curriculum_max_stage, with a player's resources (generate.curriculum_start). 0 = the game as the rules
    # define it, which is what evaluations always play.
    curriculum_share: float = 0.0
    curriculum_max_stage: int = 4
    # Each program is owned at such a start with this probability per skipped stage; 0 = programs only by
    # siphoning (R44's data siphons and the skipped stages' credits and energy are still granted).
    curriculum_program_prob: float = 0.05
    # When True, every reward of a game that started on stage s > 1 is divided by what clearing stage s pays (R104:
    # T[s - 1], 64 for stage 8), so the first clear of a late start pays 1, as a fresh game's does. Scaling a game's
    # rewards by one constant leaves its best play unchanged; what it changes is the late starts' weight in a PPO
    # batch, whose advantages are normalised together: unscaled, games started on stages 7-8 (3.5% of the steps at
    # share 0.25, up to stage 8) held 76-84% of the advantages' sum of squares, and the fresh games' normalised
    # advantages shrank to a third of their size (specs/hackmatrix.md, "Why the late starts cost the early stages").
    # Ignored while curriculum_share is 0.
    curriculum_reward_scale: bool = False
    # When True (with curriculum_reward_scale), programAcquired and programPlayed are exempt from that scale: a
    # program pays a late start what it pays a fresh game, against a first clear that pays 1 in both. Scaled, a
    # program on a stage-8 start pays 1/64 of its fresh-game price (the ratio to the stage clear the rules' game
    # has there), a guess for why two scaled-curriculum seeds owned programs less often. Measured on those two
    # seeds, it made programs rarer still (47% -> 31% of games; specs/hackmatrix.md, "Programs exempt from the
    # scale"): no shipped default uses it. Ignored while curriculum_reward_scale is off or curriculum_share is 0.
    curriculum_programs_unscaled: bool = False
    # Training shaping (not a rule: R119 pays nothing for a program acquired): this much per program
    # newly owned, as the change in the number owned, so UNDO's restore of ownedPrograms (R92, R93) takes it back
    # and acquire-and-undo loops earn nothing. 0 = the rules' reward, which is what evaluations always play.
    program_acquired_coef: float = 0.0
    # Training shaping (not a rule): this much the first time in a game each program is played (a valid
    # program action), so at most 23 times per game: playing one program over and over, or UNDO loops, earn it
    # once. 0 = the rules' reward.
    program_played_coef: float = 0.0
    # When True, programPlayed pays those first plays on the step that completes the stage they were played on
    # (or wins), and a game that ends before that forfeits them: a play is worth its price only to a player that
    # survives the stage. False = paid on the play. Ignored while program_played_coef is 0.
    program_played_at_clear: bool = False
    # The same for programAcquired: the change in the number owned since the last clear is paid on the step that
    # completes the stage (or wins), and a game that ends first forfeits it, so a program block is worth its price
    # (the transmissions it releases) only to a player that survives them. Ignored while program_acquired_coef is 0.
    program_acquired_at_clear: bool = False


def check_params(params: EnvParams) -> None:
    """ValueError (one line) for parameter values outside what the env can play."""
    if not 0.0 <= params.curriculum_share <= 1.0:
        raise ValueError(f"curriculum_share must be in [0, 1], got {params.curriculum_share}")
    if not 2 <= params.curriculum_max_stage <= 8:
        raise ValueError(f"curriculum_max_stage must be in 2..8, got {params.curriculum_max_stage}")
    if not 0.0 <= params.curriculum_program_prob <= 1.0 / 7:
        raise ValueError(f"curriculum_program_prob must be in [0, 1/7] (a probability per skipped stage, up to 7 "
                         f"skipped), got {params.curriculum_program_prob}")
    for name in ("program_acquired_coef", "program_played_coef"):  # the training shaping terms
        if not 0.0 <= getattr(params, name) < float("inf"):
            raise ValueError(f"{name} must be finite and >= 0, got {getattr(params, name)}")
    if params.max_steps_in_episode < 1:
        raise ValueError(f"max_steps_in_episode must be positive, got {params.max_steps_in_episode}")


REWARD_TERMS = (
    "step", "stage", "score", "kills", "dataSiphon", "distance", "victory", "death",
    "resourceGain", "resourceHolding", "damagePenalty", "hpRecovery", "siphonQuality",
    "programWaste", "siphonDeathPenalty", "programAcquired", "programPlayed",
)


def select(cond, if_true, if_false):
    """``where(cond, a, b)`` leaf by leaf over two states (or any matching pytrees). A leaf that is the
    same value in both (a field neither branch changed, e.g. the UNDO history) is passed through, so
    merging branches costs only the fields they rebuild."""
    return jax.tree.map(lambda a, b: a if a is b else jnp.where(cond, a, b), if_true, if_false)
