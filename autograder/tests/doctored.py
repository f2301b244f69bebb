"""Objects that lie when compared: graders must never let them pass a check (tests of every lab use them)."""


class AlwaysEqual(int):
    """An int that says it equals anything."""

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = int.__hash__


class AgreeableList(list):
    """A list that equals anything and claims to be empty."""

    def __eq__(self, other):
        return True

    def __len__(self):
        return 0
