-- hardware: a chain of DIY and hardware stores (synthetic, seeded). Snapshot date 2024-06-30.
-- Category columns hold many near-identical labels: read the stored values before filtering.
-- Prices, totals, areas and weights are REAL (GBP, m2, kg).

CREATE TABLE stores (
    store_id INTEGER PRIMARY KEY,
    store_code TEXT NOT NULL UNIQUE,
    region TEXT NOT NULL,
    store_format TEXT NOT NULL,
    floor_area_m2 REAL NOT NULL,
    opened_year INTEGER NOT NULL
);

CREATE TABLE suppliers (
    supplier_id INTEGER PRIMARY KEY,
    supplier_code TEXT NOT NULL UNIQUE,
    supplier_name TEXT NOT NULL,
    country TEXT NOT NULL,  -- ISO 3166-1 alpha-2 code
    payment_terms TEXT NOT NULL,
    annual_spend REAL NOT NULL,
    credit_limit REAL NOT NULL
);

CREATE TABLE products (
    product_id INTEGER PRIMARY KEY,
    sku TEXT NOT NULL UNIQUE,
    product_name TEXT NOT NULL,
    product_line TEXT NOT NULL,
    supplier_id INTEGER NOT NULL REFERENCES suppliers (supplier_id),
    origin_country TEXT NOT NULL,  -- where it is made, full English name
    unit_price REAL NOT NULL CHECK (unit_price > 0),
    weight_kg REAL NOT NULL,
    finish TEXT,       -- fasteners, fixings and ironmongery only
    thread_size TEXT,  -- fasteners only
    paint_colour TEXT  -- paint only
);

CREATE TABLE stock (
    stock_id INTEGER PRIMARY KEY,
    store_id INTEGER NOT NULL REFERENCES stores (store_id),
    product_id INTEGER NOT NULL REFERENCES products (product_id),
    qty_on_hand INTEGER NOT NULL CHECK (qty_on_hand >= 0),
    reorder_level INTEGER NOT NULL,
    stock_value REAL NOT NULL,  -- qty_on_hand at cost
    UNIQUE (store_id, product_id)
);

CREATE TABLE orders (
    order_id INTEGER PRIMARY KEY,
    order_ref TEXT NOT NULL UNIQUE,
    store_id INTEGER NOT NULL REFERENCES stores (store_id),
    ordered_at TEXT NOT NULL,   -- 'YYYY-MM-DD HH:MM'
    promised_on TEXT NOT NULL,  -- a day, stored as a midnight timestamp
    channel TEXT NOT NULL,
    order_status TEXT NOT NULL,
    order_total REAL NOT NULL
);

-- A delivered order may need more than one delivery.
CREATE TABLE deliveries (
    delivery_id INTEGER PRIMARY KEY,
    order_id INTEGER NOT NULL REFERENCES orders (order_id),
    slot_date TEXT NOT NULL,  -- 'YYYY-MM-DD'
    vehicle TEXT NOT NULL,
    pallet_type TEXT NOT NULL,
    pallet_count INTEGER NOT NULL CHECK (pallet_count >= 0),
    load_weight_kg REAL NOT NULL
);

CREATE INDEX idx_products_supplier ON products (supplier_id);
CREATE INDEX idx_stock_product ON stock (product_id);
CREATE INDEX idx_orders_store ON orders (store_id);
CREATE INDEX idx_deliveries_order ON deliveries (order_id);

-- one row per order: how many drops delivered it
CREATE VIEW order_drops AS
SELECT o.order_id, COUNT(d.delivery_id) AS drops
FROM orders AS o
LEFT JOIN deliveries AS d ON d.order_id = o.order_id
GROUP BY o.order_id;
