from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FileSystemStoragePathSourceConfig(_message.Message):
    __slots__ = ("servables", "file_system_poll_wait_seconds", "fail_if_zero_versions_at_startup", "servable_versions_always_present")
    class ServableVersionPolicy(_message.Message):
        __slots__ = ("latest", "all", "specific")
        class Latest(_message.Message):
            __slots__ = ("num_versions",)
            NUM_VERSIONS_FIELD_NUMBER: _ClassVar[int]
            num_versions: int
            def __init__(self, num_versions: _Optional[int] = ...) -> None: ...
        class All(_message.Message):
            __slots__ = ()
            def __init__(self) -> None: ...
        class Specific(_message.Message):
            __slots__ = ("versions",)
            VERSIONS_FIELD_NUMBER: _ClassVar[int]
            versions: _containers.RepeatedScalarFieldContainer[int]
            def __init__(self, versions: _Optional[_Iterable[int]] = ...) -> None: ...
        LATEST_FIELD_NUMBER: _ClassVar[int]
        ALL_FIELD_NUMBER: _ClassVar[int]
        SPECIFIC_FIELD_NUMBER: _ClassVar[int]
        latest: FileSystemStoragePathSourceConfig.ServableVersionPolicy.Latest
        all: FileSystemStoragePathSourceConfig.ServableVersionPolicy.All
        specific: FileSystemStoragePathSourceConfig.ServableVersionPolicy.Specific
        def __init__(self, latest: _Optional[_Union[FileSystemStoragePathSourceConfig.ServableVersionPolicy.Latest, _Mapping]] = ..., all: _Optional[_Union[FileSystemStoragePathSourceConfig.ServableVersionPolicy.All, _Mapping]] = ..., specific: _Optional[_Union[FileSystemStoragePathSourceConfig.ServableVersionPolicy.Specific, _Mapping]] = ...) -> None: ...
    class ServableToMonitor(_message.Message):
        __slots__ = ("servable_name", "base_path", "servable_version_policy")
        SERVABLE_NAME_FIELD_NUMBER: _ClassVar[int]
        BASE_PATH_FIELD_NUMBER: _ClassVar[int]
        SERVABLE_VERSION_POLICY_FIELD_NUMBER: _ClassVar[int]
        servable_name: str
        base_path: str
        servable_version_policy: FileSystemStoragePathSourceConfig.ServableVersionPolicy
        def __init__(self, servable_name: _Optional[str] = ..., base_path: _Optional[str] = ..., servable_version_policy: _Optional[_Union[FileSystemStoragePathSourceConfig.ServableVersionPolicy, _Mapping]] = ...) -> None: ...
    SERVABLES_FIELD_NUMBER: _ClassVar[int]
    FILE_SYSTEM_POLL_WAIT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    FAIL_IF_ZERO_VERSIONS_AT_STARTUP_FIELD_NUMBER: _ClassVar[int]
    SERVABLE_VERSIONS_ALWAYS_PRESENT_FIELD_NUMBER: _ClassVar[int]
    servables: _containers.RepeatedCompositeFieldContainer[FileSystemStoragePathSourceConfig.ServableToMonitor]
    file_system_poll_wait_seconds: int
    fail_if_zero_versions_at_startup: bool
    servable_versions_always_present: bool
    def __init__(self, servables: _Optional[_Iterable[_Union[FileSystemStoragePathSourceConfig.ServableToMonitor, _Mapping]]] = ..., file_system_poll_wait_seconds: _Optional[int] = ..., fail_if_zero_versions_at_startup: _Optional[bool] = ..., servable_versions_always_present: _Optional[bool] = ...) -> None: ...
