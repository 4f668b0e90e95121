"""Type stubs of the compiled parser's Python-facing API (parser.pyx)."""
from typing import Callable, Dict, List, Optional, Tuple, Union, final

OP_NAMES: Dict[int, str]
ERR_NAMES: Dict[int, Optional[str]]

@final
class Parser:
    long_lines: bool
    def feed(self, data: Union[bytes, bytearray, memoryview]) -> None: ...
    def parse(
        self,
        data: Union[bytes, bytearray, memoryview],
        accept: Optional[Callable[[int], bool]] = ...,
        tagged: Optional[Callable[[bytes], bool]] = ...,
        schedules: bool = ...,
    ) -> List[Tuple[object, ...]]: ...
