"""The exception types for problems a user can fix.

Anything a user can fix (config, data, checkpoint, command-line arguments, a path that
cannot be written) raises `UserError` with a one-line message that names the problem and
the fix; the CLI prints it and exits with its `exit_code`, without a traceback.
"""


class UserError(Exception):
    """A problem in the user's input, reported as one line and exit status 2."""

    exit_code = 2


class ResourceError(UserError):
    """The machine ran out of something (disk space): not the input's fault, exit status 1."""

    exit_code = 1
