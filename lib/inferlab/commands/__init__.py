"""The command lines of the sub-commands (`inferlab serve`/`serving`, `measure`, `verify`): names
become objects here, options are checked, and the packages below are called."""
