"""The maze and grid environment families of ssilbench (paper section 4 and its appendix
"Maze/grid Experiments").

``maze``: random mazes made with mazelab's random-walk wall algorithm, a deterministic
shortest-path expert, the ground-truth video model v*(s) = f(s, pi*(s)) and the test set of
every feasible state; optionally with no-op dynamics (the stochastic-environment study) or
a goal per episode (the goal-complexity study). ``grid``: the open 20x20 grid with a
stochastic optimal expert (the stochastic-expert study). The heavy modules (numpy,
gymnasium, torch) are imported only when an environment is used.
"""
