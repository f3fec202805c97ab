"""The core tools (read, write, edit, ls, grep, bash, todowrite) and the extension that registers them."""
