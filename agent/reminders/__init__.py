"""System reminders on the user message and in-turn reminders before model requests, admitted against the budget."""
