"""What producers and consumers call: loading segments and announcing them (the producer side).
Wiring, like the CLI: it may import every room below it, and nothing below imports it."""
