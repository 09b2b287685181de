"""The run store (DuckDB). All SQL of the project lives in this package."""

from backend.store.db import Store, default_db_path, pad_list_array
from backend.store.handle import NoSuchStore, StoreBusy, StoreHandle, open_store, store_handle

__all__ = [
    "NoSuchStore",
    "Store",
    "StoreBusy",
    "StoreHandle",
    "default_db_path",
    "open_store",
    "pad_list_array",
    "store_handle",
]
