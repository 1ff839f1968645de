"""The typed readers of a DynamoDB item in its wire form."""

from __future__ import annotations

from sandbox_common import ddb_item


def test_readers_read_strings_and_numbers_of_their_type() -> None:
    # Given an item with a string and a number attribute
    item = {"name": {"S": "t1"}, "count": {"N": "42"}}
    # When it is read
    s, i = ddb_item.readers(item)
    # Then each reader answers its type
    assert s("name") == "t1"
    assert i("count") == 42


def test_readers_absent_or_other_type_is_none() -> None:
    # Given an item whose attributes are of the other type, and a name it lacks
    item = {"name": {"N": "1"}, "count": {"S": "x"}, "flag": {"BOOL": True}}
    # When they are read
    s, i = ddb_item.readers(item)
    # Then nothing is guessed
    assert s("name") is None
    assert i("count") is None
    assert s("flag") is None and i("flag") is None
    assert s("missing") is None and i("missing") is None
