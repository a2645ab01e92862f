import inflection


def test_humanize_strips_a_trailing_id():
    assert inflection.humanize("author_id") == "Author"


def test_humanize_keeps_an_inner_id():
    assert inflection.humanize("user_identity_card") == "User identity card"


def test_humanize_keeps_an_inner_id_before_a_trailing_one():
    assert inflection.humanize("parent_idea_id") == "Parent idea"
