"""Command line: `inferlab list`, `inferlab estimate ...`, and the subcommands other modules register.

Each subcommand module exposes `register(subparsers)`; heavy imports (torch) stay inside handlers
so `inferlab list` answers instantly.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from inferlab.base.arguments import OneLineErrorParser, option_names, refuse_empty_strings
from inferlab.base.units import GB
from inferlab.commands import estimate
from inferlab.core.specs import get_accelerator, get_model, list_accelerators, list_hf_configs, list_models, resolve_model

# Modules that add subcommands (each has register(subparsers)); missing ones are skipped.
SUBCOMMAND_MODULES = ("inferlab.commands.claims", "inferlab.commands.measure", "inferlab.notebook.figures",
                      "inferlab.exercises.cli", "inferlab.commands.serving")


def _cmd_list(args) -> int:
    print("Models (exact parameter count from the architecture):")
    for name in list_models():
        m = get_model(name)
        print(f"  {name:18s} {m.n_params / 1e9:7.3f} B params  L={m.n_layers:<3d} d={m.d_model:<5d} "
              f"heads={m.n_heads}/{m.n_kv_heads} kv ({m.attention_kind})  "
              f"{'gated' if m.gated_mlp else 'plain'} MLP d_ff={m.d_ff}")
    print("\nHugging Face configs in data/hf-configs (--model NAME, or --model PATH for your own config.json):")
    for name in list_hf_configs():
        m = resolve_model(name)
        moe = f"  {m.n_experts} experts, top {m.experts_per_token}" if m.is_moe else ""
        attn = "MLA" if m.is_mla else "/".join(sorted(set(m.layer_kinds)))
        print(f"  {name:18s} {m.n_params / 1e9:7.3f} B params  {m.n_params_active / 1e9:7.3f} B active  "
              f"L={m.n_layers:<3d} d={m.d_model:<5d} attention {attn}{moe}")
    print("\nAccelerators (dense peaks; GB = 1e9 bytes):")
    for name in list_accelerators():
        a = get_accelerator(name)
        peaks = ", ".join(f"{k} {v / 1e12:g}" for k, v in a.peak_flops_per_s.items())
        print(f"  {name:10s} {a.memory_bytes / GB:5.0f} GB  {a.hbm_bytes_per_s / 1e12:5.2f} TB/s  "
              f"TFLOP/s: {peaks}")
    return 0



class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help shows its default (flags and options without one excepted)."""



def _tidy_help(parser: argparse.ArgumentParser) -> None:
    """Recursively: show defaults in every sub-command's help, and hide internal sub-commands (names
    starting with '_') from the usage line and the list of commands."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action._choices_actions = [a for a in action._choices_actions if not a.dest.startswith("_")]
            visible = [name for name in action.choices if not name.startswith("_")]
            action.metavar = "{" + ",".join(visible) + "}"
            for sub in action.choices.values():
                sub.formatter_class = _HelpFormatter
                _tidy_help(sub)



def build_parser() -> argparse.ArgumentParser:
    parser = OneLineErrorParser(prog="inferlab", description=__doc__.splitlines()[0],
                                     formatter_class=_HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="known models and accelerators").set_defaults(func=_cmd_list)

    estimate.register(sub)

    for modname in SUBCOMMAND_MODULES:
        try:
            module = importlib.import_module(modname)
        except ModuleNotFoundError as err:
            if err.name and modname.startswith(err.name):
                continue
            raise
        module.register(sub)
    _tidy_help(parser)
    return parser



def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        refuse_empty_strings(args, option_names(parser))
        return args.func(args)
    except BrokenPipeError:  # output piped into `head` and closed early: not an error
        sys.stderr.close()
        return 0
    except (ValueError, OverflowError) as err:  # bad input: one clear line, no traceback
        print(f"inferlab: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # missing folder, a directory given for a file, unwritable, /proc/...
        where = f"{err.filename}: " if err.filename else ""
        print(f"inferlab {args.command}: error: {where}{err.strerror or err}", file=sys.stderr)
        return 2
    except MemoryError:  # a backstop: the options' bounds are meant to stop this before any work
        print(f"inferlab {args.command}: error: ran out of memory; use smaller options", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"inferlab {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
