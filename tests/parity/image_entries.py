"""The image entries of tests/fixtures/images/index.json as a request carries them (base64, or a data:
URL with the file's media type), for test_image_processor.py and test_image_requests.py."""
import base64
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "images")
MIME = {"png": "png", "jpg": "jpeg", "webp": "webp", "gif": "gif", "bin": "png", "txt": "png"}


def entry_for(rec):
    data = open(os.path.join(FIX, rec["file"]), "rb").read()
    b64 = base64.b64encode(data).decode()
    if rec["entry"] == "base64":
        return b64
    return f"data:image/{MIME[rec['file'].rsplit('.', 1)[1]]};base64,{b64}"
