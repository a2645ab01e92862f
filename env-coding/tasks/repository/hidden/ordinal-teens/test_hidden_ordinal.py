import inflection


def test_ordinal_of_small_numbers():
    assert [inflection.ordinalize(n) for n in (1, 2, 3, 4, 11, 12, 13, 21)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st"]


def test_ordinal_of_teens_above_one_hundred():
    assert [inflection.ordinalize(n) for n in (111, 112, 113, 1011, 2012)] == [
        "111th", "112th", "113th", "1011th", "2012th"]


def test_ordinal_of_negative_teens():
    assert inflection.ordinalize(-113) == "-113th"
