// model library translation unit anchor (keeps the library non-empty).
