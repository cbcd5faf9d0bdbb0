"""The one exception type for bad user input.

Anything a user can fix (config, data, checkpoint, command-line arguments) raises
`UserError` with a one-line message that names the problem and the fix; the CLI
prints it and exits with status 2, without a traceback.
"""


class UserError(Exception):
    """A problem in the user's input, reported as one line and exit status 2."""
