"""The maze environment family of ssilbench (paper section 4, "Environment Complexity").

Random mazes made with mazelab's random-walk wall algorithm, a deterministic shortest-path
expert, the ground-truth video model v*(s) = f(s, pi*(s)) and the paper's test accuracy.
The heavy modules (numpy, gymnasium, torch) are imported only when the environment is used.
"""
