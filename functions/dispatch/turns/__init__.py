"""Turns: who may use a turn (its owner and token), begin_turn and end_turn; the turns table (`store`)."""
