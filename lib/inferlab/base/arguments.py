"""argparse for people: a value it cannot parse is one line, and an empty string is never taken for
"not given". Shared by every command line of the library."""
from __future__ import annotations

import argparse


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a value it cannot parse (`--batch x`) is one line naming the argument and the value,
    with a pointer to --help, instead of a usage block; exit status 2 as before."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help shows its default (flags and options without one excepted)."""



def option_names(parser: argparse.ArgumentParser, names=None) -> dict:
    """{dest: how the user types it} over every sub-command: '--policy' for options, the dest for
    positionals."""
    names = {} if names is None else names
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                option_names(sub, names)
        elif action.dest not in names:
            names[action.dest] = action.option_strings[-1] if action.option_strings else action.dest
    return names


def refuse_empty_strings(args, names: dict) -> None:
    """An empty string is not "not given": `--policy ""` or `--output ""` must not fall back to a
    default (or, for --output, to the repository's own file). ValueError naming the option."""
    for dest, value in vars(args).items():
        values = value if isinstance(value, list) else [value]
        if any(isinstance(v, str) and v.strip() == "" for v in values):
            raise ValueError(f"{names.get(dest, dest)} must not be empty; got {value!r}")

