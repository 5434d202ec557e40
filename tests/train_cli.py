"""`main(*args)`: scripts/train_purejaxrl.py run in-process, returning its exit code (SystemExit included)."""

from hephaestus import train


def main(*args):
    try:
        return train.main(list(args))
    except SystemExit as exit_:
        return exit_.code
