-- clinic: an outpatient clinic (synthetic, seeded). Snapshot date 2024-06-30: appointments
-- after it are still 'scheduled'. Dates are TEXT: birth_date/hire_date/issued_on 'YYYY-MM-DD',
-- registered_at 'YYYY-MM-DD HH:MM:SS', scheduled_at 'YYYY-MM-DD HH:MM'. Money is REAL.

CREATE TABLE departments (
    department_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    floor INTEGER NOT NULL,
    phone TEXT
);

CREATE TABLE insurers (
    insurer_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    coverage_pct INTEGER NOT NULL CHECK (coverage_pct BETWEEN 0 AND 100)  -- whole percent
);

CREATE TABLE doctors (
    doctor_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    department_id INTEGER NOT NULL REFERENCES departments (department_id),
    license_no TEXT NOT NULL UNIQUE,
    email TEXT,
    hire_date TEXT NOT NULL,
    consultation_fee REAL NOT NULL CHECK (consultation_fee >= 0),
    is_active INTEGER NOT NULL DEFAULT 1 CHECK (is_active IN (0, 1))
);

CREATE TABLE patients (
    patient_id INTEGER PRIMARY KEY,
    first_name TEXT NOT NULL,
    last_name TEXT NOT NULL,
    birth_date TEXT,
    sex TEXT CHECK (sex IN ('F', 'M', 'X')),
    email TEXT,
    phone TEXT,
    city TEXT,
    blood_type TEXT,
    insurer_id INTEGER REFERENCES insurers (insurer_id),
    registered_at TEXT NOT NULL
);

CREATE TABLE appointments (
    appointment_id INTEGER PRIMARY KEY,
    patient_id INTEGER NOT NULL REFERENCES patients (patient_id),
    doctor_id INTEGER NOT NULL REFERENCES doctors (doctor_id),
    scheduled_at TEXT NOT NULL,
    duration_min INTEGER NOT NULL CHECK (duration_min > 0),
    status TEXT NOT NULL CHECK (status IN ('scheduled', 'completed', 'cancelled', 'no_show')),
    fee REAL,  -- amount billed: the visit fee if completed, a flat fee if no_show, else NULL
    notes TEXT
);

CREATE TABLE diagnoses (
    diagnosis_id INTEGER PRIMARY KEY,
    appointment_id INTEGER NOT NULL REFERENCES appointments (appointment_id),
    icd10_code TEXT NOT NULL,
    description TEXT NOT NULL,
    is_primary INTEGER NOT NULL CHECK (is_primary IN (0, 1))
);

CREATE TABLE medications (
    medication_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    form TEXT NOT NULL CHECK (form IN ('tablet', 'capsule', 'syrup', 'injection', 'cream', 'inhaler')),
    strength_mg REAL,
    unit_price REAL NOT NULL CHECK (unit_price > 0),
    UNIQUE (name, form, strength_mg)
);

CREATE TABLE prescriptions (
    prescription_id INTEGER PRIMARY KEY,
    appointment_id INTEGER NOT NULL REFERENCES appointments (appointment_id),
    issued_on TEXT NOT NULL,
    refills INTEGER NOT NULL DEFAULT 0 CHECK (refills >= 0)
);

CREATE TABLE prescription_items (
    prescription_id INTEGER NOT NULL REFERENCES prescriptions (prescription_id),
    medication_id INTEGER NOT NULL REFERENCES medications (medication_id),
    dose TEXT NOT NULL,
    quantity INTEGER NOT NULL CHECK (quantity > 0),
    days_supply INTEGER,
    PRIMARY KEY (prescription_id, medication_id)
);

CREATE INDEX idx_doctors_department ON doctors (department_id);
CREATE INDEX idx_patients_name ON patients (last_name, first_name);
CREATE INDEX idx_appointments_patient ON appointments (patient_id);
CREATE INDEX idx_appointments_doctor_time ON appointments (doctor_id, scheduled_at);
CREATE INDEX idx_diagnoses_appointment ON diagnoses (appointment_id);
CREATE INDEX idx_prescriptions_appointment ON prescriptions (appointment_id);
CREATE INDEX idx_prescription_items_medication ON prescription_items (medication_id);

-- One row per appointment with the patient's, doctor's and department's names.
CREATE VIEW v_appointment_details AS
SELECT a.appointment_id, a.scheduled_at, a.status, a.fee,
       p.patient_id, p.first_name || ' ' || p.last_name AS patient_name,
       d.doctor_id, d.first_name || ' ' || d.last_name AS doctor_name,
       dep.name AS department
FROM appointments AS a
JOIN patients AS p ON p.patient_id = a.patient_id
JOIN doctors AS d ON d.doctor_id = a.doctor_id
JOIN departments AS dep ON dep.department_id = d.department_id;

-- Completed visits and billed fees per doctor and calendar month ('YYYY-MM').
CREATE VIEW v_doctor_monthly_revenue AS
SELECT doctor_id, substr(scheduled_at, 1, 7) AS month,
       COUNT(*) AS completed_visits, ROUND(SUM(fee), 2) AS revenue
FROM appointments
WHERE status = 'completed'
GROUP BY doctor_id, substr(scheduled_at, 1, 7);
