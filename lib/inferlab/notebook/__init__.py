"""What the chapter pages show: figures, tables, the What-if, the serving lab's helpers, the
interview answers and the cheat sheet. Formats what `core`, `serving`, `measure` and `claims`
compute."""
