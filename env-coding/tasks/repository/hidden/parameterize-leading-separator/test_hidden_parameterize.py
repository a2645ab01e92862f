import inflection


def test_parameterize_plain_words():
    assert inflection.parameterize("Donald E. Knuth") == "donald-e-knuth"


def test_parameterize_strips_a_leading_separator():
    assert inflection.parameterize("  Leading spaces") == "leading-spaces"


def test_parameterize_strips_a_leading_custom_separator():
    assert inflection.parameterize("!Hello World", separator="_") == "hello_world"
