"""Task data: one loader module per task, the batching pipeline, and the registry (tasks.py).

A `config.data.data_dir` the user names is only ever read; generated data goes to the cache directory.
"""

DATA_DIR_HINT = ("Nothing is generated into a data_dir: leave config.data.data_dir empty to use "
                 "generated data (in config.data.cache_dir)")
