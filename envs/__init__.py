"""Tasks for reasoning-rl: MATH, GSM8K, Countdown and a synthetic arithmetic task."""
