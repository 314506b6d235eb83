"""university: a registrar — departments, instructors, courses, sections, students, grades."""

from __future__ import annotations

import random
import sqlite3
from datetime import date, datetime, timedelta

from birdrl.tasks.bundled.dbs import fake, insert

DB_ID = "university"
SEED = 20240630_4
DESCRIPTION = (
    "A small university's registrar (synthetic): departments, instructors, courses with "
    "prerequisites (a self-referencing many-to-many), terms Fall 2019 to Fall 2024, course "
    "sections per term, students with majors and advisors, and enrollments (students and "
    "sections many-to-many) with letter grades mapped to points in grade_points. Quirks: "
    "W/I grades have NULL points, Fall 2024 grades are NULL (in progress), undeclared majors "
    "and TBA instructors are NULL, integer credits (integer division), course codes with a "
    "space ('CS 101'), students admitted before 2019 or after with no enrollments."
)
TABLES = (
    "departments",
    "instructors",
    "courses",
    "course_prerequisites",
    "terms",
    "sections",
    "students",
    "grade_points",
    "enrollments",
)

N_INSTRUCTORS = 140
N_STUDENTS = 3000
GRADES = (
    ("A", 4.0),
    ("A-", 3.7),
    ("B+", 3.3),
    ("B", 3.0),
    ("B-", 2.7),
    ("C+", 2.3),
    ("C", 2.0),
    ("C-", 1.7),
    ("D", 1.0),
    ("F", 0.0),
    ("W", None),
    ("I", None),
)
RANK_SALARY = {"lecturer": 62000, "assistant": 85000, "associate": 102000, "full": 135000}

# code -> (name, building, budget, ten course titles from introductory to advanced)
DEPARTMENTS = {
    "CS": ("Computer Science", "Turing Hall", 2_450_000.0, ["Introduction to Programming", "Discrete Structures", "Computer Systems Lab", "Data Structures", "Algorithms", "Databases", "Operating Systems", "Machine Learning", "Compilers", "Seminar in Computing"]),
    "MATH": ("Mathematics", "Noether Hall", 1_320_000.0, ["Calculus I", "Calculus II", "Linear Algebra", "Multivariable Calculus", "Probability", "Differential Equations", "Real Analysis", "Abstract Algebra", "Topology", "Seminar in Mathematics"]),
    "PHYS": ("Physics", "Curie Building", 1_780_000.0, ["General Physics I", "General Physics II", "Physics Lab", "Classical Mechanics", "Electromagnetism", "Thermodynamics", "Quantum Mechanics", "Statistical Physics", "Astrophysics", "Seminar in Physics"]),
    "CHEM": ("Chemistry", "Curie Building", 1_650_000.0, ["General Chemistry", "Chemistry Lab", "Organic Chemistry I", "Organic Chemistry II", "Analytical Chemistry", "Physical Chemistry", "Biochemistry", "Inorganic Chemistry", "Medicinal Chemistry", "Seminar in Chemistry"]),
    "BIO": ("Biology", "Darwin Center", 1_900_000.0, ["Principles of Biology", "Biology Lab", "Genetics", "Cell Biology", "Ecology", "Microbiology", "Molecular Biology", "Evolution", "Neurobiology", "Seminar in Biology"]),
    "ECON": ("Economics", None, 980_000.0, ["Principles of Microeconomics", "Principles of Macroeconomics", "Economic Statistics", "Intermediate Microeconomics", "Intermediate Macroeconomics", "Econometrics", "Labor Economics", "Public Finance", "Game Theory", "Seminar in Economics"]),
    "HIST": ("History", "Herodotus Hall", 610_000.0, ["World History to 1500", "World History since 1500", "Historical Methods", "Medieval Europe", "The Atlantic World", "Modern East Asia", "History of Science", "Revolutions", "Empires and Colonies", "Seminar in History"]),
    "ENGL": ("English", "Herodotus Hall", 640_000.0, ["Academic Writing", "Introduction to Literature", "Creative Writing", "Shakespeare", "The Novel", "Poetry and Poetics", "Literary Theory", "Modernism", "Postcolonial Literature", "Seminar in Literature"]),
    "PSYC": ("Psychology", "James Hall", 870_000.0, ["Introduction to Psychology", "Research Methods", "Statistics for Psychology", "Developmental Psychology", "Social Psychology", "Cognitive Psychology", "Abnormal Psychology", "Neuropsychology", "Clinical Psychology", "Seminar in Psychology"]),
    "ART": ("Art & Design", "Studio Annex", 455_000.0, ["Drawing I", "Design Foundations", "Art History Survey", "Painting", "Typography", "Photography", "Digital Media", "Sculpture", "Contemporary Art", "Seminar in Art"]),
}  # fmt: skip
LEVELS = (100, 100, 100, 200, 200, 200, 300, 300, 400, 400)


def _terms() -> list[tuple[int, str, date, date]]:
    terms = []
    for year in range(2019, 2025):
        if year > 2019:
            terms.append((f"Spring {year}", date(year, 1, 22), date(year, 5, 15)))
        terms.append((f"Fall {year}", date(year, 9, 3), date(year, 12, 20)))
    return [(i, *t) for i, t in enumerate(terms, 1)]


def populate(conn: sqlite3.Connection) -> None:
    """Insert every row, parents first, from the fixed seed."""
    rnd = random.Random(SEED)
    codes = list(DEPARTMENTS)
    insert(
        conn,
        "departments",
        ("dept_id", "code", "name", "building", "budget"),
        [(i, c, *DEPARTMENTS[c][:3]) for i, c in enumerate(codes, 1)],
    )
    instructors = _instructors(rnd, codes)
    insert(
        conn,
        "instructors",
        (
            "instructor_id",
            "first_name",
            "last_name",
            "email",
            "dept_id",
            "rank",
            "salary",
            "hired_on",
        ),
        instructors,
    )
    courses: list[tuple] = []
    for dept_id, code in enumerate(codes, 1):
        for k, (title, level) in enumerate(zip(DEPARTMENTS[code][3], LEVELS, strict=True)):
            credits = 4 if "Lab" in title else 1 if title.startswith("Seminar") else 3
            courses.append(
                (len(courses) + 1, f"{code} {level + 1 + k % 3}", title, dept_id, credits, level)
            )
    insert(conn, "courses", ("course_id", "code", "title", "dept_id", "credits", "level"), courses)
    prereqs = []
    math_intro = [c[0] for c in courses if c[3] == codes.index("MATH") + 1 and c[5] == 100]
    for c in courses:
        if c[5] == 100:
            continue
        lower = [o[0] for o in courses if o[3] == c[3] and o[5] < c[5]]
        picks = rnd.sample(lower, min(len(lower), rnd.choice((1, 1, 2))))
        if codes[c[3] - 1] in ("CS", "PHYS", "ECON") and rnd.random() < 0.4:
            picks.append(rnd.choice(math_intro))
        for p in sorted(set(picks)):
            prereqs.append((c[0], p, fake.weighted(rnd, {None: 70, "C": 20, "B-": 10})))
    insert(conn, "course_prerequisites", ("course_id", "prereq_course_id", "min_grade"), prereqs)
    terms = _terms()
    insert(
        conn,
        "terms",
        ("term_id", "name", "starts_on", "ends_on"),
        [(i, name, fake.iso_day(s), fake.iso_day(e)) for i, name, s, e in terms],
    )
    sections = _sections(rnd, courses, terms, instructors)
    insert(
        conn,
        "sections",
        ("section_id", "course_id", "term_id", "section_no", "instructor_id", "room", "capacity"),
        sections,
    )
    students = _students(rnd, codes, instructors)
    insert(
        conn,
        "students",
        (
            "student_id",
            "first_name",
            "last_name",
            "email",
            "birth_date",
            "admitted_on",
            "major_dept_id",
            "advisor_id",
            "status",
        ),
        [s[:9] for s in students],
    )
    insert(conn, "grade_points", ("grade", "points"), GRADES)
    insert(
        conn,
        "enrollments",
        ("student_id", "section_id", "enrolled_at", "grade"),
        _enrollments(rnd, students, courses, terms, sections),
    )


def _instructors(rnd: random.Random, codes: list[str]) -> list[tuple]:
    rows: list[tuple] = []
    for i in range(1, N_INSTRUCTORS + 1):
        first, last = fake.person(rnd)
        dept = rnd.randint(1, len(codes))
        rank = fake.weighted(rnd, {"lecturer": 25, "assistant": 30, "associate": 25, "full": 20})
        factor = 1.15 if codes[dept - 1] in ("CS", "ECON") else 1.0
        salary = fake.money(RANK_SALARY[rank] * factor * rnd.uniform(0.9, 1.2))
        hired = fake.day_between(rnd, date(1990, 7, 1), date(2023, 8, 15))
        email = fake.maybe(rnd, fake.email(rnd, first, last, i, "univ.example.edu"), 0.05)
        rows.append(
            (
                i,
                fake.messy(rnd, first),
                fake.messy(rnd, last),
                email,
                dept,
                rank,
                salary,
                fake.iso_day(hired),
            )
        )
    return rows


def _sections(
    rnd: random.Random, courses: list[tuple], terms: list[tuple], instructors: list[tuple]
) -> list[tuple]:
    by_dept: dict[int, list[tuple]] = {}
    for ins in instructors:
        by_dept.setdefault(ins[4], []).append(ins)
    rows: list[tuple] = []
    for term_id, name, starts, _ends in terms:
        for course in courses:
            offered = {100: 1.0, 200: 0.85, 300: 0.65, 400: 0.5}[course[5]]
            if rnd.random() > offered:
                continue
            count = rnd.choice((2, 3, 4)) if course[5] == 100 else 1
            for section_no in range(1, count + 1):
                staff = [s for s in by_dept.get(course[3], []) if s[7] < fake.iso_day(starts)]
                tba = rnd.random() < (0.15 if name == "Fall 2024" else 0.03)
                instructor = None if tba or not staff else rnd.choice(staff)[0]
                cap = rnd.randint(60, 150) if course[5] == 100 else rnd.randint(20, 60)
                room = fake.maybe(
                    rnd, f"{rnd.choice('ABCDS')}{rnd.randint(1, 4)}{rnd.randint(1, 30):02d}", 0.05
                )
                rows.append((len(rows) + 1, course[0], term_id, section_no, instructor, room, cap))
    return rows


def _students(rnd: random.Random, codes: list[str], instructors: list[tuple]) -> list[tuple]:
    """Student rows plus two extra fields: their first and last term index (or -1)."""
    advisors: dict[int, list[int]] = {}
    for ins in instructors:
        if ins[5] != "lecturer":
            advisors.setdefault(ins[4], []).append(ins[0])
    rows: list[tuple] = []
    for i in range(1, N_STUDENTS + 1):
        first, last = fake.person(rnd)
        year = rnd.randint(2016, 2024)
        admitted = date(year, 8, rnd.randint(1, 25))
        born = fake.day_between(rnd, date(year - 20, 1, 1), date(year - 17, 8, 31))
        # term index 0 = Fall 2019; Fall Y has index 2 * (Y - 2019)
        first_term = 2 * (year - 2019)
        last_term = first_term + 7
        r = rnd.random()
        status = "active"
        if r < 0.08:
            status, last_term = "withdrawn", first_term + rnd.randint(0, 5)
        elif r < 0.11:
            status, last_term = "on_leave", min(last_term, 8)
        elif last_term <= 8:
            status = "graduated"
        major = fake.maybe(rnd, rnd.randint(1, len(codes)), 0.4 if year >= 2023 else 0.08)
        advisor = rnd.choice(advisors[major]) if major and rnd.random() < 0.9 else None
        rows.append(
            (
                i,
                fake.messy(rnd, first),
                fake.messy(rnd, last),
                fake.maybe(rnd, fake.email(rnd, first, last, i, "students.example.edu"), 0.05),
                fake.maybe(rnd, fake.iso_day(born), 0.03),
                fake.iso_day(admitted),
                major,
                advisor,
                status,
                max(first_term, 0),
                min(last_term, 10),
            )
        )
    return rows


def _enrollments(
    rnd: random.Random,
    students: list[tuple],
    courses: list[tuple],
    terms: list[tuple],
    sections: list[tuple],
) -> list[tuple]:
    open_sections: dict[tuple[int, int], list[list[int]]] = {}  # (term, course) -> [[id, left]]
    for s in sections:
        open_sections.setdefault((s[2], s[1]), []).append([s[0], s[6]])
    letters = [g for g, p in GRADES if p is not None]
    levels = (100, 200, 300, 400)
    up_to = {lvl: [c for c in courses if c[5] <= lvl] for lvl in levels}
    dept_ids = sorted({c[3] for c in courses})
    major_up_to = {
        (d, lvl): [c for c in up_to[lvl] if c[3] == d] for d in dept_ids for lvl in levels
    }
    rows: list[tuple] = []
    for term_index, (term_id, _name, starts, ends) in enumerate(terms):
        graded = ends <= fake.SNAPSHOT_DATE
        for st in students:
            if not st[9] <= term_index <= st[10]:
                continue
            year_level = min(400, 100 * ((term_index - st[9]) // 2 + 1))
            ability = (st[0] * 7919 % 101) / 100  # fixed per student
            wanted = up_to[year_level]
            in_major = major_up_to.get((st[6], year_level), [])
            taken: set[int] = set()
            for _ in range(rnd.choice((3, 4, 4, 5))):
                pool = in_major if in_major and rnd.random() < 0.65 else wanted
                course = rnd.choice(pool)
                options = [o for o in open_sections.get((term_id, course[0]), []) if o[1] > 0]
                if course[0] in taken or not options:
                    continue
                section = rnd.choice(options)
                section[1] -= 1
                taken.add(course[0])
                when = datetime.combine(starts, datetime.min.time()) - timedelta(
                    minutes=rnd.randint(-7 * 1440, 60 * 1440)
                )
                grade = None
                if graded:
                    r = rnd.random()
                    if r < 0.03:
                        grade = "W"
                    elif r < 0.04:
                        grade = "I"
                    elif r > 0.997:
                        grade = None  # never submitted
                    else:
                        skew = rnd.random() * 0.6 + (1 - ability) * 0.4
                        grade = letters[min(len(letters) - 1, int(skew * skew * len(letters)))]
                rows.append(
                    (
                        st[0],
                        section[0],
                        fake.iso_seconds(when.replace(second=rnd.randint(0, 59))),
                        grade,
                    )
                )
    return rows
