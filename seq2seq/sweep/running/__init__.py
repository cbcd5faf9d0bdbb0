"""Running a sweep: its runs trained one after another, at once in worker processes
(`--jobs`), or as submitit jobs (`--launcher`), and what each run does in its process."""
