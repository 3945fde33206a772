"""clef: the clef-flash decision model from Python, over the C engine (libclef.so).

    import clef
    with clef.Engine("models/tiny") as engine:
        answer = engine.decide({"model": "clef-flash", "state": "The kettle is boiling.",
                                "questions": {"hot": {"type": "noul"}}})

See docs/python.md in the repository.
"""
from ._engine import Engine, Error, Image, Request, RequestWarning, encode_request, state_key

__version__ = "0.1.0"
__all__ = ["Engine", "Error", "Image", "Request", "RequestWarning", "encode_request", "state_key", "__version__"]
