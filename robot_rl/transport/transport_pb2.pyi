from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HelloRequest(_message.Message):
    __slots__ = ("actor_id", "layout_json", "protocol_version")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_JSON_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    actor_id: str
    layout_json: str
    protocol_version: int
    def __init__(self, actor_id: _Optional[str] = ..., layout_json: _Optional[str] = ..., protocol_version: _Optional[int] = ...) -> None: ...

class HelloReply(_message.Message):
    __slots__ = ("run_id", "acked_through_seq", "weights_version", "max_message_bytes", "protocol_version", "policy_json", "run_settings_json")
    RUN_ID_FIELD_NUMBER: _ClassVar[int]
    ACKED_THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_VERSION_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    RUN_SETTINGS_JSON_FIELD_NUMBER: _ClassVar[int]
    run_id: str
    acked_through_seq: int
    weights_version: int
    max_message_bytes: int
    protocol_version: int
    policy_json: str
    run_settings_json: str
    def __init__(self, run_id: _Optional[str] = ..., acked_through_seq: _Optional[int] = ..., weights_version: _Optional[int] = ..., max_message_bytes: _Optional[int] = ..., protocol_version: _Optional[int] = ..., policy_json: _Optional[str] = ..., run_settings_json: _Optional[str] = ...) -> None: ...

class TransitionBatch(_message.Message):
    __slots__ = ("actor_id", "first_seq", "count", "payload", "codec", "sha256")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    CODEC_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    actor_id: str
    first_seq: int
    count: int
    payload: bytes
    codec: str
    sha256: str
    def __init__(self, actor_id: _Optional[str] = ..., first_seq: _Optional[int] = ..., count: _Optional[int] = ..., payload: _Optional[bytes] = ..., codec: _Optional[str] = ..., sha256: _Optional[str] = ...) -> None: ...

class Ack(_message.Message):
    __slots__ = ("actor_id", "batch_first_seq", "acked_through_seq", "duplicates_dropped", "error")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIRST_SEQ_FIELD_NUMBER: _ClassVar[int]
    ACKED_THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    actor_id: str
    batch_first_seq: int
    acked_through_seq: int
    duplicates_dropped: int
    error: str
    def __init__(self, actor_id: _Optional[str] = ..., batch_first_seq: _Optional[int] = ..., acked_through_seq: _Optional[int] = ..., duplicates_dropped: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("actor_id", "have_weights_version")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    HAVE_WEIGHTS_VERSION_FIELD_NUMBER: _ClassVar[int]
    actor_id: str
    have_weights_version: int
    def __init__(self, actor_id: _Optional[str] = ..., have_weights_version: _Optional[int] = ...) -> None: ...

class LearnerEvent(_message.Message):
    __slots__ = ("weights", "control", "stats")
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    weights: Weights
    control: RunControl
    stats: Stats
    def __init__(self, weights: _Optional[_Union[Weights, _Mapping]] = ..., control: _Optional[_Union[RunControl, _Mapping]] = ..., stats: _Optional[_Union[Stats, _Mapping]] = ...) -> None: ...

class Weights(_message.Message):
    __slots__ = ("version", "payload", "sha256")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    PAYLOAD_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    version: int
    payload: bytes
    sha256: str
    def __init__(self, version: _Optional[int] = ..., payload: _Optional[bytes] = ..., sha256: _Optional[str] = ...) -> None: ...

class RunControl(_message.Message):
    __slots__ = ("command", "reason")
    class Command(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        COMMAND_UNSPECIFIED: _ClassVar[RunControl.Command]
        PAUSE: _ClassVar[RunControl.Command]
        RESUME: _ClassVar[RunControl.Command]
        STOP: _ClassVar[RunControl.Command]
    COMMAND_UNSPECIFIED: RunControl.Command
    PAUSE: RunControl.Command
    RESUME: RunControl.Command
    STOP: RunControl.Command
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    command: RunControl.Command
    reason: str
    def __init__(self, command: _Optional[_Union[RunControl.Command, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class Stats(_message.Message):
    __slots__ = ("updates", "replay_size", "actors", "update_backlog")
    UPDATES_FIELD_NUMBER: _ClassVar[int]
    REPLAY_SIZE_FIELD_NUMBER: _ClassVar[int]
    ACTORS_FIELD_NUMBER: _ClassVar[int]
    UPDATE_BACKLOG_FIELD_NUMBER: _ClassVar[int]
    updates: int
    replay_size: int
    actors: _containers.RepeatedCompositeFieldContainer[ActorStats]
    update_backlog: int
    def __init__(self, updates: _Optional[int] = ..., replay_size: _Optional[int] = ..., actors: _Optional[_Iterable[_Union[ActorStats, _Mapping]]] = ..., update_backlog: _Optional[int] = ...) -> None: ...

class ActorStats(_message.Message):
    __slots__ = ("actor_id", "transitions", "duplicates_dropped", "batches_rejected", "episodes", "last_episode_return", "acked_through_seq")
    ACTOR_ID_FIELD_NUMBER: _ClassVar[int]
    TRANSITIONS_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    BATCHES_REJECTED_FIELD_NUMBER: _ClassVar[int]
    EPISODES_FIELD_NUMBER: _ClassVar[int]
    LAST_EPISODE_RETURN_FIELD_NUMBER: _ClassVar[int]
    ACKED_THROUGH_SEQ_FIELD_NUMBER: _ClassVar[int]
    actor_id: str
    transitions: int
    duplicates_dropped: int
    batches_rejected: int
    episodes: int
    last_episode_return: float
    acked_through_seq: int
    def __init__(self, actor_id: _Optional[str] = ..., transitions: _Optional[int] = ..., duplicates_dropped: _Optional[int] = ..., batches_rejected: _Optional[int] = ..., episodes: _Optional[int] = ..., last_episode_return: _Optional[float] = ..., acked_through_seq: _Optional[int] = ...) -> None: ...
