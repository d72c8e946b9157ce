"""The ground floor: what every room of gspo_trl imports, and nothing of gspo_trl itself.

User errors (`errors`), the one coercion of user values (`coercion`), did-you-mean
(`suggest`), the commands' argument parser (`arguments`), progress bars (`progress`),
torch's CPU thread count (`cpu_threads`) and the logged metrics' names (`metric_names`).
The reward library and the recipe configuration both stand on it
(tests/test_architecture.py).
"""
