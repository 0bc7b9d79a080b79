"""Training machinery shared by every method: step budgets, the minibatch loop, devices."""
