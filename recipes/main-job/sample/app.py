"""A tiny inventory service: the sample project the main job reviews."""

import json

STOCK_FILE = "stock.json"


def load_stock():
    # TODO: handle a missing stock file instead of crashing
    with open(STOCK_FILE) as f:
        return json.load(f)


def reserve(stock, item, count):
    # TODO: reservations are not atomic; two clients can oversell
    if stock.get(item, 0) < count:
        raise ValueError(f"not enough {item}")
    stock[item] -= count
    return stock
