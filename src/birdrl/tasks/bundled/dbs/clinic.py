"""clinic: an outpatient clinic — patients, doctors, appointments, diagnoses, prescriptions."""

from __future__ import annotations

import random
import sqlite3
from datetime import date, timedelta

from birdrl.tasks.bundled.dbs import fake, insert

DB_ID = "clinic"
SEED = 20240630_1
DESCRIPTION = (
    "An outpatient clinic (synthetic): departments, doctors, insurers, patients, "
    "appointments (2021-01 to 2024-09; after the 2024-06-30 snapshot they are 'scheduled'), "
    "ICD-10 diagnoses per visit, prescriptions and their medications (many-to-many through "
    "prescription_items). Quirks: NULL emails/birth dates/sex/insurer, city spelled in mixed "
    "case or with trailing spaces, some duplicate patient registrations, whole-number "
    "coverage_pct, scheduled_at without seconds but registered_at with seconds."
)
TABLES = (
    "departments",
    "insurers",
    "doctors",
    "patients",
    "appointments",
    "diagnoses",
    "medications",
    "prescriptions",
    "prescription_items",
)

N_DOCTORS = 80
N_PATIENTS = 4000
N_DUPLICATE_PATIENTS = 40
N_APPOINTMENTS = 30000
FIRST_DAY = date(2021, 1, 4)
LAST_DAY = date(2024, 9, 30)
NO_SHOW_FEE = 25.0

# department -> (floor, base fee, [(ICD-10 code, description)])
DEPARTMENTS = {
    "Family Medicine": (1, 90, [("I10", "Essential (primary) hypertension"), ("E11.9", "Type 2 diabetes mellitus without complications"), ("J06.9", "Acute upper respiratory infection, unspecified"), ("Z00.00", "Encounter for general adult medical examination without abnormal findings"), ("E78.5", "Hyperlipidemia, unspecified"), ("N39.0", "Urinary tract infection, site not specified")]),
    "Cardiology": (3, 180, [("I48.91", "Unspecified atrial fibrillation"), ("R07.9", "Chest pain, unspecified"), ("I10", "Essential (primary) hypertension"), ("I25.10", "Atherosclerotic heart disease of native coronary artery")]),
    "Dermatology": (2, 140, [("L20.9", "Atopic dermatitis, unspecified"), ("L70.0", "Acne vulgaris"), ("L40.0", "Psoriasis vulgaris")]),
    "Endocrinology": (3, 160, [("E11.9", "Type 2 diabetes mellitus without complications"), ("E03.9", "Hypothyroidism, unspecified"), ("E05.90", "Thyrotoxicosis, unspecified")]),
    "Gastroenterology": (4, 170, [("K21.9", "Gastro-esophageal reflux disease without esophagitis"), ("K58.9", "Irritable bowel syndrome without diarrhea"), ("K29.70", "Gastritis, unspecified")]),
    "Neurology": (4, 190, [("G43.909", "Migraine, unspecified"), ("G40.909", "Epilepsy, unspecified"), ("R51.9", "Headache, unspecified")]),
    "Obstetrics & Gynecology": (2, 150, [("Z34.90", "Encounter for supervision of normal pregnancy, unspecified"), ("N94.6", "Dysmenorrhea, unspecified")]),
    "Orthopedics": (1, 160, [("M54.5", "Low back pain"), ("M17.11", "Unilateral primary osteoarthritis, right knee"), ("S93.401A", "Sprain of unspecified ligament of right ankle, initial encounter")]),
    "Pediatrics": (2, 110, [("J06.9", "Acute upper respiratory infection, unspecified"), ("J45.909", "Unspecified asthma, uncomplicated"), ("F90.0", "Attention-deficit hyperactivity disorder, predominantly inattentive type")]),
    "Psychiatry": (5, 200, [("F41.1", "Generalized anxiety disorder"), ("F32.9", "Major depressive disorder, single episode, unspecified"), ("F90.0", "Attention-deficit hyperactivity disorder, predominantly inattentive type")]),
}  # fmt: skip

INSURERS = (
    ("Acme Health", 80), ("BlueRiver Mutual", 70), ("CareFirst Plus", 90), ("Medisure", 60),
    ("National Health Co-op", 85), ("Oakline Insurance", 50), ("Summit Assurance", 75),
    ("Unity Care", 65),
)  # fmt: skip

MEDICATIONS = (
    ("Lisinopril", "tablet", 10, 0.12), ("Lisinopril", "tablet", 20, 0.15),
    ("Metformin", "tablet", 500, 0.08), ("Metformin", "tablet", 1000, 0.11),
    ("Atorvastatin", "tablet", 20, 0.21), ("Atorvastatin", "tablet", 40, 0.29),
    ("Amoxicillin", "capsule", 500, 0.35), ("Amoxicillin", "syrup", None, 4.80),
    ("Ibuprofen", "tablet", 400, 0.06), ("Ibuprofen", "tablet", 600, 0.09),
    ("Sertraline", "tablet", 50, 0.27), ("Sertraline", "tablet", 100, 0.33),
    ("Omeprazole", "capsule", 20, 0.19), ("Levothyroxine", "tablet", 0.05, 0.14),
    ("Levothyroxine", "tablet", 0.1, 0.16), ("Albuterol", "inhaler", None, 24.50),
    ("Hydrocortisone", "cream", None, 6.75), ("Sumatriptan", "tablet", 50, 1.10),
    ("Cetirizine", "tablet", 10, 0.05), ("Prednisone", "tablet", 20, 0.13),
    ("Insulin glargine", "injection", None, 89.90), ("Methylphenidate", "tablet", 10, 0.95),
    ("Levetiracetam", "tablet", 500, 0.42), ("Apixaban", "tablet", 5, 3.20),
    ("Metoprolol", "tablet", 50, 0.10), ("Amlodipine", "tablet", 5, 0.07),
    ("Doxycycline", "capsule", 100, 0.55), ("Nitrofurantoin", "capsule", 100, 0.85),
    ("Fluoxetine", "capsule", 20, 0.18), ("Naproxen", "tablet", 500, 0.12),
    ("Tretinoin", "cream", None, 38.00), ("Ondansetron", "tablet", 4, 0.48),
)  # fmt: skip

DOSES = (
    "1 tablet once daily", "1 tablet twice daily", "2 tablets at bedtime",
    "as needed, max 3 per day", "apply thinly twice daily", "10 ml three times daily",
    "1 unit per 10 kg, evening",
)  # fmt: skip
CITIES = (
    "Springfield", "Riverton", "Lakeside", "Fairview", "Greenville", "Madison", "Franklin",
    "Clinton", "Georgetown", "Salem",
)  # fmt: skip
BLOOD_TYPES = {"O+": 37, "A+": 30, "B+": 9, "AB+": 3, "O-": 7, "A-": 6, "B-": 2, "AB-": 1}


def populate(conn: sqlite3.Connection) -> None:
    """Insert every row, parents first, from the fixed seed."""
    rnd = random.Random(SEED)
    departments = list(DEPARTMENTS)
    insert(
        conn,
        "departments",
        ("department_id", "name", "floor", "phone"),
        [
            (i, name, DEPARTMENTS[name][0], fake.maybe(rnd, f"555-01{i:02d}", 0.1))
            for i, name in enumerate(departments, 1)
        ],
    )
    insert(
        conn,
        "insurers",
        ("insurer_id", "name", "coverage_pct"),
        [(i, name, pct) for i, (name, pct) in enumerate(INSURERS, 1)],
    )
    doctors = _doctors(rnd, departments)
    insert(
        conn,
        "doctors",
        (
            "doctor_id",
            "first_name",
            "last_name",
            "department_id",
            "license_no",
            "email",
            "hire_date",
            "consultation_fee",
            "is_active",
        ),
        doctors,
    )
    patients = _patients(rnd)
    insert(
        conn,
        "patients",
        (
            "patient_id",
            "first_name",
            "last_name",
            "birth_date",
            "sex",
            "email",
            "phone",
            "city",
            "blood_type",
            "insurer_id",
            "registered_at",
        ),
        patients,
    )
    insert(
        conn,
        "medications",
        ("medication_id", "name", "form", "strength_mg", "unit_price"),
        [(i, *m) for i, m in enumerate(MEDICATIONS, 1)],
    )
    _visits(conn, rnd, doctors, departments, patients)


def _doctors(rnd: random.Random, departments: list[str]) -> list[tuple]:
    weights = [3 if d in ("Family Medicine", "Pediatrics") else 1 for d in departments]
    licenses = rnd.sample(range(100000, 999999), N_DOCTORS)
    rows: list[tuple] = []
    for i in range(1, N_DOCTORS + 1):
        dep = rnd.choices(range(1, len(departments) + 1), weights=weights)[0]
        first, last = fake.person(rnd)
        base = DEPARTMENTS[departments[dep - 1]][1]
        hired = fake.day_between(rnd, date(2005, 1, 1), date(2023, 12, 31))
        rows.append(
            (
                i,
                fake.messy(rnd, first),
                fake.messy(rnd, last),
                dep,
                f"MD-{licenses[i - 1]}",
                fake.maybe(rnd, fake.email(rnd, first, last, i, "clinic.example.org"), 0.1),
                fake.iso_day(hired),
                fake.money(base + rnd.choice((0, 0, 10, 15, 25, -10))),
                0 if rnd.random() < 0.08 else 1,
            )
        )
    return rows


def _patients(rnd: random.Random) -> list[tuple]:
    rows: list[tuple] = []
    for i in range(1, N_PATIENTS + 1):
        first, last = fake.person(rnd)
        birth = fake.day_between(rnd, date(1935, 1, 1), date(2023, 12, 31))
        registered = fake.at_time(
            rnd, fake.day_between(rnd, date(2015, 1, 1), date(2024, 6, 30)), 7, 19
        ).replace(second=rnd.randint(0, 59))
        rows.append(
            (
                i,
                fake.messy(rnd, first),
                fake.messy(rnd, last),
                fake.maybe(rnd, fake.iso_day(birth), 0.02),
                fake.maybe(rnd, fake.weighted(rnd, {"F": 49, "M": 48, "X": 1}), 0.03),
                fake.maybe(rnd, fake.email(rnd, first, last, i), 0.2),
                fake.maybe(rnd, fake.phone(rnd), 0.05),
                fake.maybe(rnd, fake.messy(rnd, rnd.choice(CITIES), 0.1), 0.04),
                fake.maybe(rnd, fake.weighted(rnd, BLOOD_TYPES), 0.3),
                fake.maybe(rnd, rnd.randint(1, len(INSURERS)), 0.15),
                fake.iso_seconds(registered),
            )
        )
    # The same person registered twice (front-desk duplicates): same name and birth date.
    for k, original in enumerate(rnd.sample(rows, N_DUPLICATE_PATIENTS)):
        again = fake.at_time(rnd, date(2024, 1, 2) + timedelta(days=k * 4), 7, 19)
        rows.append(
            (
                len(rows) + 1,
                original[1].strip(),
                original[2].strip(),
                original[3],
                original[4],
                None,
                fake.phone(rnd),
                original[7],
                None,
                original[9],
                fake.iso_seconds(again),
            )
        )
    return rows


def _visits(
    conn: sqlite3.Connection,
    rnd: random.Random,
    doctors: list[tuple],
    departments: list[str],
    patients: list[tuple],
) -> None:
    """Appointments in time order, and the diagnoses and prescriptions of completed ones."""
    days = sorted(fake.day_between(rnd, FIRST_DAY, LAST_DAY) for _ in range(N_APPOINTMENTS))
    registered_on = [row[10][:10] for row in patients]
    regulars = rnd.sample(range(1, len(patients) + 1), len(patients) // 10)  # frequent visitors
    appointments: list[tuple] = []
    diagnoses: list[tuple] = []
    prescriptions: list[tuple] = []
    items: list[tuple] = []
    for appointment_id, day in enumerate(days, 1):
        doctor = rnd.choice(doctors)
        while doctor[6] > fake.iso_day(day) or (day > fake.SNAPSHOT_DATE and not doctor[8]):
            doctor = rnd.choice(doctors)
        patient = 0
        while not patient or registered_on[patient - 1] > fake.iso_day(day):
            patient = rnd.choice(regulars) if rnd.random() < 0.4 else rnd.randint(1, len(patients))
        slot = rnd.randint(32, 71)  # quarter hours from 08:00 to 17:45
        scheduled = f"{fake.iso_day(day)} {slot // 4:02d}:{slot % 4 * 15:02d}"
        duration = rnd.choice((15, 20, 30, 30, 45, 60))
        if day > fake.SNAPSHOT_DATE:
            status = "cancelled" if rnd.random() < 0.06 else "scheduled"
        else:
            status = fake.weighted(rnd, {"completed": 80, "cancelled": 12, "no_show": 8})
        fee = None
        if status == "completed":
            fee = fake.money(doctor[7] * (1.5 if duration == 60 else 1.0))
        elif status == "no_show":
            fee = NO_SHOW_FEE
        note = rnd.choice(("follow-up in 3 months", "patient late", "referred by GP", "")) or None
        appointments.append(
            (
                appointment_id,
                patient,
                doctor[0],
                scheduled,
                duration,
                status,
                fee,
                fake.maybe(rnd, note, 0.85),
            )
        )
        if status != "completed":
            continue
        codes = DEPARTMENTS[departments[doctor[3] - 1]][2]
        picked = rnd.sample(codes, 2 if len(codes) > 1 and rnd.random() < 0.3 else 1)
        for rank, (code, text) in enumerate(picked):
            diagnoses.append(
                (
                    len(diagnoses) + 1,
                    appointment_id,
                    fake.messy(rnd, code, 0.02),
                    text,
                    int(rank == 0),
                )
            )
        if rnd.random() < 0.45:
            prescription_id = len(prescriptions) + 1
            prescriptions.append(
                (prescription_id, appointment_id, fake.iso_day(day), rnd.choice((0, 0, 1, 2, 5)))
            )
            for medication in rnd.sample(range(1, len(MEDICATIONS) + 1), rnd.choice((1, 1, 2, 3))):
                items.append(
                    (
                        prescription_id,
                        medication,
                        rnd.choice(DOSES),
                        rnd.choice((10, 14, 20, 28, 30, 60, 90)),
                        fake.maybe(rnd, rnd.choice((7, 14, 30, 90)), 0.2),
                    )
                )
    insert(
        conn,
        "appointments",
        (
            "appointment_id",
            "patient_id",
            "doctor_id",
            "scheduled_at",
            "duration_min",
            "status",
            "fee",
            "notes",
        ),
        appointments,
    )
    insert(
        conn,
        "diagnoses",
        ("diagnosis_id", "appointment_id", "icd10_code", "description", "is_primary"),
        diagnoses,
    )
    insert(
        conn,
        "prescriptions",
        ("prescription_id", "appointment_id", "issued_on", "refills"),
        prescriptions,
    )
    insert(
        conn,
        "prescription_items",
        ("prescription_id", "medication_id", "dose", "quantity", "days_supply"),
        items,
    )
