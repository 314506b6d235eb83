-- freight: an ocean freight forwarder's bookings (synthetic, seeded; port facts approximate).
-- Snapshot date 2024-06-30: sailings departing after it are still ahead.
-- Ports are UN/LOCODEs, carriers SCAC codes, countries ISO 3166-1 alpha-2, currencies ISO 4217.
-- Dates are TEXT 'YYYY-MM-DD'; times are TEXT 'YYYY-MM-DD HH:MM', local to the port.

CREATE TABLE ports (
    port_code TEXT PRIMARY KEY,  -- UN/LOCODE: country + location
    port_name TEXT NOT NULL UNIQUE,
    latitude REAL NOT NULL,
    longitude REAL NOT NULL,
    utc_offset_min INTEGER NOT NULL  -- standard time, no DST
);

-- The forwarder's accounts (the party that books and pays).
CREATE TABLE customers (
    customer_id INTEGER PRIMARY KEY,
    account_no TEXT NOT NULL UNIQUE,
    trading_as TEXT NOT NULL,
    country TEXT NOT NULL,
    credit_limit_usd REAL,  -- NULL: prepaid account
    customer_since INTEGER NOT NULL  -- year
);

-- The weekly sailing schedule the forwarder sells: one row per vessel voyage and lane.
CREATE TABLE sailings (
    sailing_id INTEGER PRIMARY KEY,
    carrier_code TEXT NOT NULL,
    vessel_name TEXT NOT NULL,
    voyage_no TEXT NOT NULL,
    pol_code TEXT NOT NULL REFERENCES ports (port_code),  -- port of loading
    pod_code TEXT NOT NULL REFERENCES ports (port_code),  -- port of discharge
    cutoff_date TEXT NOT NULL,  -- documentation cut-off of the sailing week
    etd TEXT NOT NULL,
    eta TEXT NOT NULL,
    rate_usd_feu REAL NOT NULL,  -- contract rate per 40-foot container
    allocation_teu INTEGER NOT NULL,
    CHECK (pol_code <> pod_code),
    CHECK (eta > etd)
);

CREATE TABLE shipments (
    shipment_id INTEGER PRIMARY KEY,
    shipment_ref TEXT NOT NULL UNIQUE,  -- house bill of lading
    customer_id INTEGER NOT NULL REFERENCES customers (customer_id),
    sailing_id INTEGER NOT NULL REFERENCES sailings (sailing_id),
    booked_at TEXT NOT NULL,
    service_level TEXT NOT NULL,
    incoterm TEXT NOT NULL,
    commodity_group TEXT NOT NULL,
    hazard_class TEXT NOT NULL,  -- IMDG class, or none
    shipment_status TEXT NOT NULL,
    gross_weight_kg REAL NOT NULL,
    volume_cbm REAL NOT NULL,
    packages INTEGER NOT NULL,
    rail_terminal TEXT REFERENCES ports (port_code),  -- inland destination of a rail leg
    delivered_at TEXT
);

-- Full container loads; consolidated (groupage) shipments have no rows here.
CREATE TABLE containers (
    container_id INTEGER PRIMARY KEY,
    shipment_id INTEGER NOT NULL REFERENCES shipments (shipment_id),
    container_no TEXT NOT NULL,  -- ISO 6346: owner code, serial, check digit
    iso_type TEXT NOT NULL,  -- ISO 6346 size and type code
    vgm_kg REAL,  -- verified gross mass; NULL until the box is gated in
    seal_no TEXT,
    set_temp_c REAL,  -- reefers only
    UNIQUE (shipment_id, container_no)
);

-- Import customs declarations lodged by the forwarder, one per shipment at most.
CREATE TABLE customs_entries (
    entry_id INTEGER PRIMARY KEY,
    shipment_id INTEGER NOT NULL UNIQUE REFERENCES shipments (shipment_id),
    entry_no TEXT NOT NULL UNIQUE,
    filing_country TEXT NOT NULL,
    entry_status TEXT NOT NULL,
    lodged_at TEXT NOT NULL,
    released_at TEXT,
    duty_amount REAL NOT NULL,  -- in currency
    customs_value REAL NOT NULL,  -- in currency
    currency TEXT NOT NULL
);

CREATE INDEX idx_sailings_pol_pod ON sailings (pol_code, pod_code);
CREATE INDEX idx_shipments_sailing ON shipments (sailing_id);
CREATE INDEX idx_shipments_customer ON shipments (customer_id);
CREATE INDEX idx_containers_shipment ON containers (shipment_id);

-- Containers and TEU booked on each sailing (a 20-foot box is 1 TEU, longer ones 2).
CREATE VIEW v_sailing_load AS
SELECT s.sailing_id, s.carrier_code, s.allocation_teu,
       COUNT(c.container_id) AS containers,
       COALESCE(SUM(CASE WHEN substr(c.iso_type, 1, 1) = '2' THEN 1 ELSE 2 END), 0) AS teu_booked
FROM sailings AS s
LEFT JOIN shipments AS sh ON sh.sailing_id = s.sailing_id
LEFT JOIN containers AS c ON c.shipment_id = sh.shipment_id
GROUP BY s.sailing_id;
