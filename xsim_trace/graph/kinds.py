"""Enumerations of the Chakra schema: node types, collective types, attribute value kinds."""

from __future__ import annotations

import enum


class NodeType(enum.IntEnum):
    INVALID = 0
    METADATA = 1
    MEM_LOAD = 2
    MEM_STORE = 3
    COMP = 4
    COMM_SEND = 5
    COMM_RECV = 6
    COMM_COLL = 7


class CollectiveType(enum.IntEnum):
    ALL_REDUCE = 0
    REDUCE = 1
    ALL_GATHER = 2
    GATHER = 3
    SCATTER = 4
    BROADCAST = 5
    ALL_TO_ALL = 6
    REDUCE_SCATTER = 7
    REDUCE_SCATTER_BLOCK = 8
    BARRIER = 9


class AttrKind(enum.Enum):
    """Which member of ``AttributeProto.value`` is set; the value is the protobuf field name.

    ``NONE`` is an attribute whose oneof is unset (only a name / doc string on the wire).
    """

    NONE = ""
    DOUBLE = "double_val"
    DOUBLE_LIST = "double_list"
    FLOAT = "float_val"
    FLOAT_LIST = "float_list"
    INT32 = "int32_val"
    INT32_LIST = "int32_list"
    INT64 = "int64_val"
    INT64_LIST = "int64_list"
    UINT32 = "uint32_val"
    UINT32_LIST = "uint32_list"
    UINT64 = "uint64_val"
    UINT64_LIST = "uint64_list"
    SINT32 = "sint32_val"
    SINT32_LIST = "sint32_list"
    SINT64 = "sint64_val"
    SINT64_LIST = "sint64_list"
    FIXED32 = "fixed32_val"
    FIXED32_LIST = "fixed32_list"
    FIXED64 = "fixed64_val"
    FIXED64_LIST = "fixed64_list"
    SFIXED32 = "sfixed32_val"
    SFIXED32_LIST = "sfixed32_list"
    SFIXED64 = "sfixed64_val"
    SFIXED64_LIST = "sfixed64_list"
    BOOL = "bool_val"
    BOOL_LIST = "bool_list"
    STRING = "string_val"
    STRING_LIST = "string_list"
    BYTES = "bytes_val"
    BYTES_LIST = "bytes_list"

    @property
    def is_list(self) -> bool:
        return self.value.endswith("_list")


ATTR_KIND_BY_FIELD: dict[str, AttrKind] = {k.value: k for k in AttrKind if k is not AttrKind.NONE}
