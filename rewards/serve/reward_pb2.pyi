from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ImageBatch(_message.Message):
    __slots__ = ("jpeg",)
    JPEG_FIELD_NUMBER: _ClassVar[int]
    jpeg: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, jpeg: _Optional[_Iterable[bytes]] = ...) -> None: ...

class PredictRequest(_message.Message):
    __slots__ = ("request_id", "images", "state", "task_text")
    class ImagesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ImageBatch
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ImageBatch, _Mapping]] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    IMAGES_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    TASK_TEXT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    images: _containers.MessageMap[str, ImageBatch]
    state: bytes
    task_text: str
    def __init__(self, request_id: _Optional[str] = ..., images: _Optional[_Mapping[str, ImageBatch]] = ..., state: _Optional[bytes] = ..., task_text: _Optional[str] = ...) -> None: ...

class PredictReply(_message.Message):
    __slots__ = ("request_id", "success_prob", "reward", "model_id", "model_version")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_PROB_FIELD_NUMBER: _ClassVar[int]
    REWARD_FIELD_NUMBER: _ClassVar[int]
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    success_prob: _containers.RepeatedScalarFieldContainer[float]
    reward: _containers.RepeatedScalarFieldContainer[float]
    model_id: str
    model_version: str
    def __init__(self, request_id: _Optional[str] = ..., success_prob: _Optional[_Iterable[float]] = ..., reward: _Optional[_Iterable[float]] = ..., model_id: _Optional[str] = ..., model_version: _Optional[str] = ...) -> None: ...

class InfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class InfoReply(_message.Message):
    __slots__ = ("model_id", "model_version", "cameras", "max_batch", "max_message_bytes")
    MODEL_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    CAMERAS_FIELD_NUMBER: _ClassVar[int]
    MAX_BATCH_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    model_id: str
    model_version: str
    cameras: _containers.RepeatedScalarFieldContainer[str]
    max_batch: int
    max_message_bytes: int
    def __init__(self, model_id: _Optional[str] = ..., model_version: _Optional[str] = ..., cameras: _Optional[_Iterable[str]] = ..., max_batch: _Optional[int] = ..., max_message_bytes: _Optional[int] = ...) -> None: ...
