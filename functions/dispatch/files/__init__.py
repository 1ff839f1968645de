"""Files in and artifacts out: input files placed before the code (`inputs`), artifacts collected
after it and stored (`artifacts`), get_file (`access`)."""
