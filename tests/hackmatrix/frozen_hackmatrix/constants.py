"""Static tables of the HackMatrix rules (see specs/hackmatrix-rules.md)."""
import numpy as np

SIZE = 6
NCELLS = 36
MAX_ENTITIES = 36          # unified enemy + transmission slots (D2, see specs/hackmatrix.md)
HISTORY_CAP = 16           # D7: UNDO snapshots kept per environment (a ring, oldest dropped)
NUM_PROGRAMS = 23
NUM_ACTIONS = 28
OBS_SIZE = 10 + 23 + 36 * 42  # 1545
GRID_CHANNELS = 42
BLOCK_ATTEMPTS = 100       # R32
ATTEMPT_BATCH = 8          # parallel block-placement attempts per batch (D8)
BIG = 1 << 20

# cell content codes (R8)
EMPTY, BLOCK, DATA_SIPHON, EXIT = 0, 1, 2, 3

# enemy types (R18)
VIRUS, DAEMON, GLITCH, CRYPTOG = 0, 1, 2, 3
ENEMY_NAMES = ("virus", "daemon", "glitch", "cryptog")  # by type id (R18)
ENEMY_LETTERS = "VDGC"
ENEMY_MAX_HP = np.array([2, 3, 2, 2], np.int32)
ENEMY_SPEED = np.array([2, 1, 1, 1], np.int32)

# directions (R5): up, down, left, right
DIRS = np.array([[1, 0], [-1, 0], [0, -1], [0, 1]], np.int32)

CORNERS = np.array([0, 5, 30, 35], np.int32)  # (0,0) (0,5) (5,0) (5,5)

PROGRAM_NAMES = [
    "PUSH", "PULL", "CRASH", "WARP", "POLY", "WAIT", "DEBUG", "ROW", "COL", "UNDO",
    "STEP", "SIPH+", "EXCH", "SHOW", "RESET", "CALM", "D_BOM", "DELAY", "ANTI-V",
    "SCORE", "REDUC", "ATK+", "HACK",
]
# (credits, energy, spawn) per program, §9
PROGRAM_TABLE = np.array([
    [0, 2, 4], [0, 2, 4], [3, 2, 6], [2, 2, 5], [1, 1, 3], [0, 1, 1], [3, 0, 4],
    [3, 1, 2], [3, 1, 2], [1, 0, 3], [0, 3, 4], [5, 0, 7], [4, 0, 3], [2, 0, 2],
    [0, 4, 2], [2, 4, 6], [3, 0, 4], [1, 2, 4], [3, 0, 4], [0, 5, 5], [2, 1, 3],
    [4, 4, 8], [2, 2, 4],
], np.int32)
PROGRAM_CREDITS = PROGRAM_TABLE[:, 0]
PROGRAM_ENERGY = PROGRAM_TABLE[:, 1]
PROGRAM_SPAWN = PROGRAM_TABLE[:, 2]
(P_PUSH, P_PULL, P_CRASH, P_WARP, P_POLY, P_WAIT, P_DEBUG, P_ROW, P_COL, P_UNDO, P_STEP,
 P_SIPHP, P_EXCH, P_SHOW, P_RESET, P_CALM, P_DBOM, P_DELAY, P_ANTIV, P_SCORE, P_REDUC,
 P_ATKP, P_HACK) = range(23)
A_SIPHON = 4
A_RESET = 5 + P_RESET
A_WAIT = 5 + P_WAIT
A_UNDO = 5 + P_UNDO


STAGE_REWARDS = np.array([1, 2, 4, 8, 16, 32, 64, 100], np.float32)  # R104
# R110: half of the stage rewards of completed stages, indexed by currentStage-1
DEATH_PENALTY_SUMS = np.array([STAGE_REWARDS[: s - 1].sum() for s in range(1, 9)], np.float32)


def _rays():
    """RAY_IDX[pos, dir, k] = cell index k+1 steps from pos in dir; RAY_INB in-bounds."""
    idx = np.zeros((36, 4, 5), np.int32)
    inb = np.zeros((36, 4, 5), bool)
    for p in range(36):
        r, c = divmod(p, 6)
        for d in range(4):
            for k in range(5):
                rr, cc = r + DIRS[d, 0] * (k + 1), c + DIRS[d, 1] * (k + 1)
                if 0 <= rr < 6 and 0 <= cc < 6:
                    idx[p, d, k] = rr * 6 + cc
                    inb[p, d, k] = True
    return idx, inb


RAY_IDX, RAY_INB = _rays()
NBR_IDX = RAY_IDX[:, :, 0]   # [36, 4] neighbour index in R5 order
NBR_INB = RAY_INB[:, :, 0]
CELL_ROW = np.arange(36, dtype=np.int32) // 6
CELL_COL = np.arange(36, dtype=np.int32) % 6
# CROSS[p, q] = q is in the siphon cross of p (R47)
CROSS = np.eye(36, dtype=bool)
for _p in range(36):
    for _d in range(4):
        if NBR_INB[_p, _d]:
            CROSS[_p, NBR_IDX[_p, _d]] = True
IS_CORNER = np.zeros(36, bool)
IS_CORNER[CORNERS] = True

